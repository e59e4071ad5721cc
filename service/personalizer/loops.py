"""Personalizer learning loops (``service.personalizer.routers``): Azure AI Personalizer's
rank, reward, activate and configuration calls translated onto the same use cases as the
native API (one engine, one state store, one log; docs/personalizer.md).

A loop is a policy. The default loop (:data:`DEFAULT_LOOP`, created at start when
absent) has Personalizer's defaults: a shared model over JSON features (hybrid LinUCB
with no per-arm part, greedy score), context x action interactions, epsilon-greedy at
20%, reward wait 10 minutes, default reward 0, rewards in [-1, 1].

Its service configuration maps onto the policy's settings: ``rewardWaitTime`` ->
``reward_wait_seconds``, ``defaultReward`` -> ``default_reward``,
``explorationPercentage`` -> ``epsilon``; the other settings are kept in the spec's
``personalizer`` field so that reading the configuration returns them (of those
``logRetentionDays``, ``modelRetrainDays`` and the Auto-Optimize schedule act). The learning
policy is a Vowpal Wabbit argument string (:mod:`service.personalizer.vw_arguments`
says what each option does) or this service's JSON policy spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from service import timeparse
from service.errors import Conflict, InvalidRequest, NotFound
from service.personalizer.learning_modes import (
    APPRENTICE_METRICS_KEY,
    ApprenticeMetrics,
    mode_started,
    serving_of,
    with_mode,
)
from service.personalizer.loop_policy import (
    CB_TYPE_KEY,
    DEFAULT_LOOP_SPEC,
    ENGINE_OF_VW,
    POLICY_ARGUMENTS_KEY,
    cb_type_in,
    parse_vw_arguments,
    vw_arguments,
)
from service.personalizer.loop_rewards import apply_held_rewards, reward_loop_event
from service.personalizer.schemas import (
    PersonalizerPolicy,
    PersonalizerRankRequest,
    PersonalizerServiceConfiguration,
)
from service.personalizer.settings import (
    APPRENTICE,
    ONLINE,
    LoopSettings,
    update_frequency,
    update_interval,
)
from service.schemas import PolicySpec, RecommendRequest
from service.storage.state_store import PartStore
from service.usecases.admin import PolicyAdmin
from service.usecases.recommend import Recommender
from service.usecases.rewards import Rewards

DEFAULT_LOOP = "personalizer"
# kept in PolicySpec.personalizer; log_retention_days and model_retrain_days act here
KEPT_SETTINGS = (
    "model_export_frequency",
    "log_retention_days",
    "log_mirror_enabled",
    "log_mirror_sas_uri",
    "is_auto_optimization_enabled",
    "auto_optimization_frequency",
    "auto_optimization_start_date",
    "model_retrain_days",
)
POLICY_NAME_KEY = "policyName"


def parse_duration(value: str, field: str) -> float:
    """Seconds of the ISO 8601 duration ``value`` (``PT10M``,
    :func:`service.timeparse.parse_duration`); a 400 naming ``field`` unless it parses to
    a fixed length (years and months have none)."""
    try:
        return timeparse.parse_duration(value, field)
    except ValueError as exc:
        raise InvalidRequest(str(exc), ["body", field]) from None


NATIVE_TO_PERSONALIZER = {
    "context": "contextFeatures",
    "arms": "actions",
    "exclude": "excludedActions",
    "event_id": "eventId",
    "defer_activation": "deferActivation",
}
"""The native request's fields a rank request fills, by their Personalizer names."""


def in_rank_request(exc: InvalidRequest) -> InvalidRequest:
    """``exc``, raised on the native request a rank is served by, located in the rank
    request: the same message, problem and kind, the location in Personalizer's field names
    (``["body", "context", 0, "user"]`` -> ``["body", "contextFeatures", 0, "user"]``)."""
    loc = [NATIVE_TO_PERSONALIZER.get(p, p) if isinstance(p, str) else p for p in exc.loc or []]
    located = InvalidRequest(exc.message, loc or ["body"], exc.code, problem=exc.problem)
    located.kind = exc.kind
    return located


def _loc_message(error: Mapping[str, Any], prefix: str) -> str:
    path = ".".join(str(p) for p in error["loc"])
    return f"{prefix}{'.' + path if path else ''}: {error['msg']}"


@dataclass
class Loops:
    """The Personalizer use cases; one per process, over the native ones."""

    admin: PolicyAdmin
    recommender: Recommender
    rewards: Rewards
    store: PartStore  # the apprentice metrics beside the loop's model

    async def ensure_default_loop(self) -> bool:
        """Create the default loop unless it exists; whether it was created."""
        return await self.admin.ensure_policy(DEFAULT_LOOP, DEFAULT_LOOP_SPEC)

    # ---- configuration ---------------------------------------------------------------
    async def service_configuration(self, loop: str) -> PersonalizerServiceConfiguration:
        """The loop's settings as Personalizer's service configuration, with its latest
        apprentice metrics once Apprentice mode was turned on; while a new model is
        relearned from the log for another config (:mod:`service.usecases.retrain`), that
        config's settings, as :meth:`policy_configuration` shows its learning policy."""
        info = await self.admin.upcoming_policy(loop)
        kept = LoopSettings.of(info)
        stored = await self.admin.cache.read(loop, [APPRENTICE_METRICS_KEY], {})
        data = stored[APPRENTICE_METRICS_KEY].data
        mode = kept.learning_mode
        if data is not None:
            metrics: ApprenticeMetrics | None = ApprenticeMetrics.from_json(data)
        elif mode == APPRENTICE:
            metrics = ApprenticeMetrics(start_time=mode_started(kept) or info.updated_at)
        else:
            metrics = None
        return PersonalizerServiceConfiguration.model_validate(
            {
                **kept.model_dump(mode="json", by_alias=True),
                "rewardWaitTime": timeparse.format_duration(info.reward_wait_seconds),
                "defaultReward": info.default_reward,
                "explorationPercentage": info.epsilon or 0.0,
                "modelUpdateFrequency": update_frequency(info.model_update_interval),
                "learningMode": mode,
                "lastConfigurationEditDate": datetime.fromtimestamp(info.updated_at, UTC),
                "latestApprenticeModeMetrics": None if metrics is None else metrics.contract(),
            }
        )

    async def update_service_configuration(
        self, loop: str, config: PersonalizerServiceConfiguration
    ) -> PersonalizerServiceConfiguration:
        """Apply a service configuration: the reward wait, default reward and exploration
        become the policy's, the aggregation and learning mode the loop's; none of them
        resets what was learned (docs/personalizer.md, "Learning settings and the
        model"). As Personalizer, switching between Online and Apprentice with another
        defaultReward, rewardWaitTime or rewardAggregation in the same call is a 400
        ``InvalidLearningModeServiceConfiguration``. Turning Apprentice on starts its
        metrics afresh. The settings with no effect here are kept."""
        info = await self.admin.get_policy(loop)
        wait = parse_duration(config.reward_wait_time, "rewardWaitTime")
        if wait <= 0:
            raise InvalidRequest(
                f"rewardWaitTime must be a positive duration, but got {config.reward_wait_time!r}",
                ["body", "rewardWaitTime"],
            )
        parse_duration(config.model_export_frequency, "modelExportFrequency")
        interval = update_interval(config.model_update_frequency, info.model_update_interval)
        if config.log_mirror_enabled and config.log_mirror_sas_uri:
            raise InvalidRequest(
                "logMirrorSasUri: this service has no Azure storage to mirror the log to; "
                "write the log out with `bandit export-log` instead (logMirrorEnabled: false)",
                ["body", "logMirrorSasUri"],
            )
        low, high = info.reward_range
        if config.default_reward is not None and not low <= config.default_reward <= high:
            raise InvalidRequest(
                f"defaultReward must lie in the loop's reward range [{low}, {high}], "
                f"but got {config.default_reward}",
                ["body", "defaultReward"],
            )
        kept = LoopSettings.of(info)
        old_mode = kept.learning_mode
        mode = config.learning_mode or old_mode
        if {old_mode, mode} == {ONLINE, APPRENTICE}:
            changed = [
                name
                for name, old, new in (
                    ("defaultReward", info.default_reward, config.default_reward),
                    ("rewardWaitTime", info.reward_wait_seconds, wait),
                    (
                        "rewardAggregation",
                        kept.reward_aggregation,
                        config.reward_aggregation,
                    ),
                )
                if old != new
            ]
            if changed:
                raise InvalidRequest(
                    f"learningMode: switching from {old_mode} to {mode} cannot change "
                    f"{', '.join(changed)} in the same call; change the mode first, then "
                    "the other settings",
                    ["body", "learningMode"],
                    code="InvalidLearningModeServiceConfiguration",
                )
        now = self.admin.clock()
        settings = config.model_dump(
            mode="json",
            by_alias=True,
            include={*KEPT_SETTINGS, "reward_aggregation"},
            exclude_none=True,
        )
        new_settings = with_mode(kept.updated(settings), mode, now)
        await self.admin.update_policy(
            loop,
            {
                "reward_wait_seconds": wait,
                "default_reward": config.default_reward,
                "epsilon": config.exploration_percentage,
                "model_update_interval": interval,
                "personalizer": new_settings.stored(),
                "retrain_days": float(new_settings.model_retrain_days),
            },
        )
        if mode == APPRENTICE and old_mode != APPRENTICE:
            fresh = ApprenticeMetrics(start_time=now).to_json()
            await self.store.transact(
                loop, [APPRENTICE_METRICS_KEY], lambda _values: {APPRENTICE_METRICS_KEY: fresh}
            )
        return await self.service_configuration(loop)

    async def policy_configuration(self, loop: str) -> PersonalizerPolicy:
        """The loop's learning policy; while a new model is relearned from the log for
        another one (:mod:`service.usecases.retrain`), the one it is relearned for."""
        info = await self.admin.upcoming_policy(loop)
        name = LoopSettings.of(info).policy_name
        return PersonalizerPolicy(name=name, arguments=vw_arguments(info))

    async def update_policy_configuration(
        self, loop: str, contract: PersonalizerPolicy
    ) -> tuple[PersonalizerPolicy, list[str]]:
        """Replace the learning policy: a JSON policy spec (``arguments`` starting with
        ``{``) replaces the whole policy but the loop's kept settings; VW arguments set the
        default shared model with their epsilon and interactions; a new engine relearns
        the last ``modelRetrainDays`` of the log. Returns the VW arguments ignored too."""
        info = await self.admin.get_policy(loop)
        settings = LoopSettings.of(info).without(POLICY_ARGUMENTS_KEY)
        kept = settings.updated({POLICY_NAME_KEY: contract.name}).stored()
        days = float(settings.model_retrain_days)
        if contract.arguments.lstrip().startswith("{"):
            try:
                spec = PolicySpec.model_validate_json(contract.arguments)
            except ValidationError as exc:
                raise InvalidRequest(
                    _loc_message(exc.errors()[0], "arguments"), ["body", "arguments"]
                ) from None
            own = info.retrain_days if spec.retrain_days is None else spec.retrain_days
            spec = spec.model_copy(update={"personalizer": kept, "retrain_days": own})
            await self.admin.put_policy(loop, spec)
            return await self.policy_configuration(loop), []
        changes, ignored = parse_vw_arguments(contract.arguments)
        engine = {f: getattr(DEFAULT_LOOP_SPEC, f) for f in ENGINE_OF_VW}
        kept = {
            **kept,
            POLICY_ARGUMENTS_KEY: contract.arguments,
            CB_TYPE_KEY: cb_type_in(contract.arguments),
        }
        await self.admin.update_policy(
            loop, {**engine, **changes, "personalizer": kept, "retrain_days": days}
        )
        return await self.policy_configuration(loop), ignored

    async def apply_setting(self, loop: str, name: str, arguments: str) -> str:
        """Make the learning setting ``arguments``, named ``name``, the loop's
        (:meth:`update_policy_configuration`); returns the arguments now in force (the
        core's :data:`~service.usecases.learning_settings.ApplySetting`)."""
        contract = PersonalizerPolicy(name=name, arguments=arguments)
        applied, _ = await self.update_policy_configuration(loop, contract)
        return applied.arguments

    async def reset_policy_configuration(self, loop: str) -> PersonalizerPolicy:
        """Back to the default learning policy (the default loop's engine and epsilon)."""
        info = await self.admin.get_policy(loop)
        settings = LoopSettings.of(info)
        kept = (
            settings.without(POLICY_NAME_KEY)
            .without(POLICY_ARGUMENTS_KEY)
            .without(CB_TYPE_KEY)
            .stored()
        )
        engine = {f: getattr(DEFAULT_LOOP_SPEC, f) for f in (*ENGINE_OF_VW, "epsilon")}
        changes = {"personalizer": kept, "retrain_days": float(settings.model_retrain_days)}
        await self.admin.update_policy(loop, {**engine, **changes})
        return await self.policy_configuration(loop)

    # ---- runtime ---------------------------------------------------------------------
    async def rank(
        self,
        loop: str,
        body: PersonalizerRankRequest,
        annotations: Mapping[str, Any] | None = None,
        stored_event_id: str | None = None,
    ) -> dict[str, Any]:
        """Rank the actions: the served one is ``rewardActionId`` (not necessarily the
        first of ``ranking`` when exploring; the baseline, the first action not
        excluded, in Apprentice and LoggingOnly modes), excluded actions are never served
        and listed with probability 0; a repeated ``eventId`` answers the first decision.
        ``annotations`` are stored with the event (:meth:`Recommender.recommend`);
        ``stored_event_id``, when given, is the decision's id instead of the body's (a
        multi-slot event's per-slot id, which may pass a client id's 256 characters).

        The answer is :class:`PersonalizerRankResponse`'s JSON as a plain dict (its
        fields by alias, in its order), for the router to serialize once."""
        ids = [a.id for a in body.actions]
        if len(set(ids)) < len(ids):  # then name them (ids.count is quadratic)
            duplicates = sorted({a for a in ids if ids.count(a) > 1})
            raise InvalidRequest(f"actions: duplicate ids {duplicates}", ["body", "actions"])
        excluded = [a for a in dict.fromkeys(body.excluded_actions or []) if a in ids]
        if len(excluded) == len(ids):
            raise InvalidRequest(
                "excludedActions: every action is excluded, nothing can be ranked",
                ["body", "excludedActions"],
            )
        try:
            request = RecommendRequest(
                policy=loop,
                context=body.context_features or [],
                arms=list(body.actions),  # already ArmCandidates: not validated again
                exclude=excluded or None,
                event_id=body.event_id,
                defer_activation=body.defer_activation,
            )
        except ValidationError as exc:
            error = exc.errors()[0]
            loc = ["body", *error["loc"]]
            raise in_rank_request(
                InvalidRequest(_loc_message(error, "body"), loc, problem=error["msg"])
            ) from None
        if stored_event_id is not None:
            request = request.model_copy(update={"event_id": stored_event_id})
        baseline = next(a for a in ids if a not in excluded)
        try:
            decision = await self.recommender.recommend(request, annotations, serving_of(baseline))
        except InvalidRequest as exc:  # name Personalizer's fields, not /recommend's
            raise in_rank_request(exc) from exc
        ranking = [{"id": r.arm_id, "probability": r.propensity} for r in decision.ranking]
        ranking += [{"id": a, "probability": 0.0} for a in excluded]
        return {
            "ranking": ranking,
            "eventId": decision.event_id,
            "rewardActionId": decision.arm_id,
        }

    async def reward(self, loop: str, event_id: str, value: float) -> None:
        """Reward the event under the loop's ``rewardAggregation``
        (:mod:`service.personalizer.loop_rewards`). As in Personalizer, a reward for an
        event this loop does not know or did not activate is accepted and not learned
        from; one after the reward wait is logged as late, not learned from."""
        await reward_loop_event(self.rewards, loop, event_id, value)

    async def activate(self, loop: str, event_id: str) -> None:
        """Activate a deferred event (accepted and ignored when unknown or finalized),
        then apply the rewards it received before (:func:`apply_held_rewards`)."""
        await self.admin.get_policy(loop)
        if await self.rewards.owner(event_id) != loop:
            return
        try:
            await self.rewards.activate(event_id)
        except (NotFound, Conflict):
            return
        await apply_held_rewards(self.rewards, loop, event_id)
