"""The logs the offline-evaluation commands evaluate on (docs/offline.md): a news or
JSON Lines file, the service's own event log (``--format eventlog``, read through
:class:`service.storage.offline_source.EventLogSource`), its logged JSON features re-featurized
for the evaluated policy's layout when asked (docs/features.md), or DSJSON files of Azure AI
Personalizer's logs (``--format dsjson``, read through
:func:`service.storage.offline_source.dsjson_events`), their JSON featurized under
``--features``. A log is read once per process (:func:`load_log` is cached per
:class:`LogSpec`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bandit_core.datasets import JsonlLog, LoggedEvent, LogSource, load_news, news_dataset_path
from bandit_core.errors import ConfigError
from bandit_core.evaluation import smallest_pscore
from bandit_core.features import Featurizer, FeaturizerConfig, SparseRows
from bandit_core.featurized import featurized_dimension, featurized_rows
from bandit_core.registry import make_policy, policy_class
from service.cli.arguments import CliError, CommandFailed
from service.schemas import MAX_DENSE_DIMENSION  # the offline commands keep rows dense
from service.storage.partitions import day_ranges

if TYPE_CHECKING:
    from service.storage.offline_source import Featurize
    from service.storage.sql_log import SqlEventLog


@dataclass(frozen=True)
class LogSpec:
    """Where a log comes from (hashable: logs are cached per process by it, and it is what
    ``bandit compare`` sends to its workers)."""

    data: str
    fmt: str
    log_policy: str | None = None
    since: float | None = None
    until: float | None = None
    unrewarded: str = "skip"
    features: str | None = None
    """The featurizer config of --features / --features-file as canonical JSON (None: the
    logged policy's own)."""
    files: tuple[str, ...] = ()
    """Every file of a news, JSONL or DSJSON log of several (``data`` is the first), read
    one after the other (a DSJSON log's in the order of their first decisions' times); ()
    for a log of one file or an event log."""


def _features_option(args: argparse.Namespace) -> str | None:
    """The featurizer config of ``--features`` or ``--features-file``, checked and written
    as canonical JSON (hashable, for :class:`LogSpec`); None when neither is given."""
    if args.features is not None:
        option, text = "--features", args.features
    elif args.features_file is not None:
        option = f"--features-file {args.features_file}"
        try:
            text = args.features_file.read_text()
        except OSError as exc:
            raise CliError(f"{option}: {exc.strerror or exc}") from None
    else:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{option}: not valid JSON ({exc})") from None
    try:
        config = FeaturizerConfig.from_dict(data)
    except (ConfigError, TypeError) as exc:
        raise CliError(f"{option}: {exc}") from None
    return json.dumps(config.to_dict(), sort_keys=True)


def log_spec(args: argparse.Namespace) -> LogSpec:
    """The log the options of :func:`service.cli.arguments.add_log_source` name, checked
    (an option that does not apply to the format is a :class:`CliError`)."""
    paths = args.data
    if paths is None:
        if args.format != "news":
            raise CliError(f"--format {args.format} needs --data")
        paths = [str(news_dataset_path())]
    if args.format == "dsjson":
        paths = _dsjson_files(paths)
    features = _features_option(args)
    files = tuple(paths) if len(paths) > 1 else ()
    spec = LogSpec(
        paths[0], args.format, args.log_policy, args.since, args.until, args.unrewarded, features
    )
    spec = dataclasses.replace(spec, files=files)
    if spec.fmt == "eventlog":
        if files:
            raise CliError("--format eventlog takes one --data URL, but got several")
        if spec.log_policy is None:
            raise CliError("--format eventlog needs --log-policy NAME")
    elif (
        spec.log_policy is not None
        or spec.since is not None
        or spec.until is not None
        or spec.unrewarded != "skip"
    ):
        raise CliError(
            "--log-policy, --since, --until and --unrewarded apply to --format eventlog only"
        )
    elif spec.fmt == "dsjson":
        if features is None:
            raise CliError(
                "--format dsjson needs --features or --features-file: the featurizer config of "
                "the loop that logged it (a Personalizer loop's default: "
                '\'{"bits": 8, "interactions": [["*", "*"]]}\')'
            )
    elif features is not None:
        raise CliError("--features and --features-file apply to --format eventlog and dsjson only")
    return spec


def _dsjson_files(paths: list[str]) -> list[str]:
    """The files of a DSJSON log's ``--data`` (a directory read as ``bandit import-log``
    reads it), in the order of their first decisions' times (so that a learning replay
    streams them in time order); a malformed first line is a :class:`CommandFailed`."""
    from service.storage.dsjson_files import LOG_SUFFIXES, BadLine, first_time, log_files

    try:
        files = log_files([Path(p) for p in paths])
    except FileNotFoundError as exc:
        raise CliError(f"--data {exc}") from None
    if not files:
        raise CliError(f"--data {' '.join(paths)}: no files ending {', '.join(LOG_SUFFIXES)}")
    try:
        return [str(f) for f in sorted(files, key=first_time)]
    except BadLine as exc:
        raise CommandFailed(str(exc)) from None


def featurized(spec: LogSpec) -> bool:
    """Whether ``spec``'s log holds JSON features, made into rows for each evaluated
    policy's layout (an event log, a DSJSON log): its rows depend on the policy."""
    return spec.fmt in ("eventlog", "dsjson")


def load_log(spec: LogSpec, policy: str, params: dict[str, Any]) -> tuple[LogSource, int]:
    """The log and its feature length ``d`` for evaluating ``policy`` with ``params``: an
    event log of JSON features is featurized for that policy's layout (and its
    ``context_dim``), as is a DSJSON log; every other log is the same for every policy."""
    if not featurized(spec):
        return _load_rows(spec, None, 0)
    return _load_rows(spec, policy, int(params.get("context_dim", 0)))


@functools.lru_cache(maxsize=4)
def _load_rows(spec: LogSpec, policy: str | None, context_dim: int) -> tuple[LogSource, int]:
    """The log and its feature length ``d`` (cached per process)."""
    log, d = _read_rows(spec, policy, context_dim)
    return log, one_width(spec, [] if d is None else [d])


def read_partition(
    spec: LogSpec, policy: str, params: dict[str, Any]
) -> tuple[list[LoggedEvent], int | None]:
    """The events of one partition of a log (:func:`partitions`) for evaluating ``policy``
    with ``params``, read here and not kept (a partition may be empty: ``d`` is then None)."""
    if featurized(spec):
        log, d = _read_rows(spec, policy, int(params.get("context_dim", 0)))
    else:
        log, d = _read_rows(spec, None, 0)
    return list(log), d


@dataclass(frozen=True)
class PartitionFacts:
    """What a driver learns of a partition without holding it: its events, their
    feature length (None: no events) and, when asked, their smallest propensity."""

    events: int
    d: int | None
    min_pscore: float | None = None


def partition_facts(
    spec: LogSpec, policy: str, params: dict[str, Any], pscores: bool = False
) -> PartitionFacts:
    """The :class:`PartitionFacts` of one partition (read where this runs, not kept);
    ``pscores``: with the smallest propensity (rejection sampling's ``p_min``)."""
    events, d = read_partition(spec, policy, params)
    return PartitionFacts(len(events), d, smallest_pscore(events) if pscores else None)


def _read_rows(spec: LogSpec, policy: str | None, context_dim: int) -> tuple[LogSource, int | None]:
    """The log and its feature length ``d`` (None: no events)."""
    if spec.fmt == "eventlog":
        events = _load_event_log(spec, policy, context_dim)
    elif spec.files:
        events = [e for part in partitions(spec) for e in _read_rows(part, policy, context_dim)[0]]
    else:
        path = Path(spec.data)
        if not path.is_file():
            raise CliError(f"--data {path}: no such file")
        if spec.fmt == "news":
            log = load_news(path)
            return log, log.d
        if spec.fmt == "dsjson":
            assert policy is not None
            events = _load_dsjson(spec, path, policy, context_dim)
        else:
            events = list(JsonlLog(path))
    if not events:
        return events, None
    return events, one_width(spec, [int(e.X.shape[1]) for e in events])


def one_width(spec: LogSpec, widths: list[int]) -> int:
    """The one feature length of a log's events (``widths``, theirs or its partitions');
    no events or several lengths are a :class:`CliError`."""
    found = sorted(set(widths))
    if not found:
        raise CliError(f"--data {spec.data}: the log holds no events")
    if len(found) > 1:
        raise CliError(
            f"--data {spec.data}: events have feature lengths {found}; one length is needed "
            "(for an event log, pick a --since after the policy's dimension changed)"
        )
    return found[0]


def partitions(spec: LogSpec) -> list[LogSpec]:
    """The time-ordered partitions of ``spec``'s log that offline tasks read on their own:
    an event log's UTC days (``since``/``until`` cut at midnight, the days between its
    policy's first and last decision in range), each file of a log of several files, a
    file as a whole."""
    if spec.fmt != "eventlog":
        return [dataclasses.replace(spec, data=f, files=()) for f in spec.files] or [spec]
    with _event_log(spec) as event_log:
        span = event_log.time_range(spec.log_policy or "")
    if span is None:
        return [spec]
    ranges = day_ranges(spec.since, spec.until, *span)
    return [dataclasses.replace(spec, since=a, until=b) for a, b in ranges]


def _featurizer_config(spec: LogSpec, logged: dict[str, Any] | None) -> FeaturizerConfig | None:
    """The featurizer a replay of ``spec`` uses: --features, else the logged policy's own
    ``features`` (``logged`` is its config in the event log, None when deleted)."""
    if spec.features is not None:
        return FeaturizerConfig.from_dict(json.loads(spec.features))
    features = None if logged is None else logged.get("features")
    return None if features is None else FeaturizerConfig.from_dict(features)


def _refeaturize(
    spec: LogSpec, config: FeaturizerConfig, policy: str, context_dim: int
) -> Featurize:
    """The rows ``policy`` (with ``context_dim``) takes for a logged decision's JSON under
    ``config`` (``bandit_core.featurized.featurized_rows``, made dense). A decision that
    logged float vectors is a :class:`CliError`."""
    layout = policy_class(policy).FEATURE_LAYOUT
    d = featurized_dimension(layout, config, context_dim)
    if d > MAX_DENSE_DIMENSION:
        raise CliError(
            f"{policy} over features with bits {config.bits} takes rows of {d} entries; the offline "
            f"commands keep rows dense, at most {MAX_DENSE_DIMENSION}: lower bits in --features"
        )
    extra = {"context_dim": context_dim} if context_dim else {}
    shape = make_policy(policy, d, **extra)  # featurized_rows reads its layout and d only
    featurizer = Featurizer(config)

    def featurize(context: Any, actions: list[Any]) -> np.ndarray:
        if any(_is_vector(f) for f in [context, *actions]):
            raise CliError(
                f"the event log of {spec.log_policy!r} holds float vectors, not JSON features: "
                "--features applies to a policy that logged JSON features"
            )
        rows = featurized_rows(featurizer, shape, context, actions)
        return rows.to_dense() if isinstance(rows, SparseRows) else rows

    return featurize


def _is_vector(value: Any) -> bool:
    """A logged float vector (a non-empty list of numbers), as a policy without
    ``features`` logs its rows."""
    return type(value) is list and bool(value) and all(type(v) in (int, float) for v in value)


@contextlib.contextmanager
def _event_log(spec: LogSpec) -> Iterator[SqlEventLog]:
    """The event log at ``spec.data`` (checked to be a PostgreSQL or SQLite URL), closed
    afterwards; a database that does not answer is a :class:`CommandFailed`."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from service.storage.base import StoreUnavailableError
    from service.storage.sql_log import SqlEventLog

    try:
        url = make_url(spec.data)
    except ArgumentError:
        raise CliError(
            f"--data must be a postgresql:// or sqlite:/// URL with --format eventlog, but got {spec.data!r}"
        ) from None
    if url.get_backend_name() not in ("postgresql", "sqlite"):
        raise CliError(
            f"--data must be a postgresql:// or sqlite:/// URL with --format eventlog, but got {spec.data!r}"
        )
    if url.get_backend_name() == "sqlite" and not (url.database and Path(url.database).is_file()):
        raise CliError(f"--data {spec.data}: no such SQLite file")
    event_log = SqlEventLog(spec.data)
    try:
        yield event_log
    except StoreUnavailableError as exc:
        message = " ".join(str(exc).split())  # a driver's message may span lines
        raise CommandFailed(
            f"--data {url.render_as_string(hide_password=True)}: {message}"
        ) from None
    finally:
        event_log.close()


def _load_dsjson(spec: LogSpec, path: Path, policy: str, context_dim: int) -> list[LoggedEvent]:
    """Every rewarded decision of the DSJSON file ``path``, its JSON featurized under
    ``--features`` for ``policy`` (:func:`_refeaturize`); a malformed line is a
    :class:`CommandFailed` naming its file and line."""
    from service.storage.dsjson_files import BadLine
    from service.storage.offline_source import dsjson_events

    config = _featurizer_config(spec, None)
    assert config is not None  # log_spec requires --features with --format dsjson
    try:
        return list(dsjson_events(path, _refeaturize(spec, config, policy, context_dim)))
    except BadLine as exc:
        raise CommandFailed(str(exc)) from None


def _load_event_log(spec: LogSpec, policy: str | None, context_dim: int) -> list[LoggedEvent]:
    """Every event of ``spec``'s policy and time range, read from the service's event log;
    JSON features re-featurized for ``policy`` (:func:`_refeaturize`)."""
    from service.storage.offline_source import EventLogSource, check_logged, default_reward

    assert spec.log_policy is not None
    with _event_log(spec) as event_log:
        check_logged(event_log, spec.log_policy)
        fill = default_reward(event_log, spec.log_policy) if spec.unrewarded == "default" else None
        config = _featurizer_config(spec, event_log.policies().get(spec.log_policy))
        featurize = None
        if config is not None and policy is not None:
            featurize = _refeaturize(spec, config, policy, context_dim)
        source = EventLogSource(
            event_log, spec.log_policy, spec.since, spec.until, unrewarded=fill, featurize=featurize
        )
        return list(source)


def source_fields(spec: LogSpec) -> dict[str, Any]:
    """The log's description in a JSON result (a URL's password hidden)."""
    if spec.fmt != "eventlog":
        fields = {"data": list(spec.files) or spec.data, "format": spec.fmt}
        return (
            fields if spec.features is None else {**fields, "features": json.loads(spec.features)}
        )
    from sqlalchemy.engine import make_url

    return {
        "data": make_url(spec.data).render_as_string(hide_password=True),
        "format": spec.fmt,
        "log_policy": spec.log_policy,
        "since": spec.since,
        "until": spec.until,
        "unrewarded": spec.unrewarded,
        "features": None if spec.features is None else json.loads(spec.features),
    }


def source_title(spec: LogSpec) -> str:
    """The log's name in a plot's title."""
    if spec.fmt == "eventlog":
        return f"the event log of {spec.log_policy}"
    return ", ".join(Path(f).name for f in spec.files or [spec.data])
