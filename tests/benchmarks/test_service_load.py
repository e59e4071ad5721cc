"""The request bodies of benchmarks/service_load.py."""

from __future__ import annotations

import json

import service.usecases  # noqa: F401  (first: the loops module alone meets an import cycle)
from bandit_core.features import Featurizer, FeaturizerConfig
from benchmarks.featurizer import request
from benchmarks.service_load import rank_body
from service.personalizer.loop_policy import DEFAULT_FEATURES
from service.personalizer.schemas import PersonalizerRankRequest


def test_the_rank_body_is_the_goal_request_as_personalizer_sdks_send_it() -> None:
    body = json.loads(rank_body())
    ranked = PersonalizerRankRequest.model_validate(body)
    featurizer = Featurizer(FeaturizerConfig.from_dict(DEFAULT_FEATURES))
    assert len(featurizer.hash_features(body["contextFeatures"], ("context",)).values) == 15
    assert [len(featurizer.hash_features(a.features).values) for a in ranked.actions] == [6] * 50
    # the facts of the goal's request (benchmarks.featurizer), as --json-bits sends them
    context, actions = request(0)
    assert {k: v for part in body["contextFeatures"] for k, v in part.items()} == context
    assert [a["features"] for a in body["actions"]] == [[a] for a in actions]
