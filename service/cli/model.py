"""``bandit model``: a policy's model as one file, through a running server
(``/policies/{name}/model`` via :class:`service.client.BanditClient`; the same use case
as Personalizer's ``model`` routes, docs/personalizer.md "Model export, import and reset").

    bandit model export --policy shop --url http://127.0.0.1:8000 --file shop.model
    bandit model import --policy shop --url http://127.0.0.1:8000 --file shop.model
    bandit model import --policy shop --url http://127.0.0.1:8000 --file other.model --replace-settings
    bandit model reset --policy shop --url http://127.0.0.1:8000
    bandit model properties --policy shop --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from service.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from service.cli.features import add_server_arguments, api_key

ACTIONS = ("export", "import", "reset", "properties")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``model`` to ``subparsers``."""
    cmd = subparsers.add_parser(
        "model",
        help="export, import or reset a policy's model (asks a running server)",
        description=(
            "A policy's whole model as one file: export it, import it into a policy "
            "(of this or another server), reset it, or show when it started and last learned."
        ),
    )
    cmd.add_argument("action", choices=ACTIONS)
    add_server_arguments(cmd)
    cmd.add_argument("--file", type=Path, help="the model file (export writes, import reads)")
    cmd.add_argument(
        "--replace-settings",
        action="store_true",
        help="import: give the policy the file's algorithm, dimension, features, guardrails "
        "and safe arm where they differ (without it such a file is refused, naming each "
        "difference, and nothing changes)",
    )
    cmd.set_defaults(run=_model)


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _model(args: argparse.Namespace) -> int:
    import httpx

    from service.client import BanditAPIError, BanditClient

    if args.action in ("export", "import") and args.file is None:
        print(f"bandit model {args.action}: --file is required", file=sys.stderr)
        return EXIT_USAGE
    try:
        with BanditClient(args.url, api_key=api_key(args.api_key), timeout=600.0) as client:
            if args.action == "export":
                data = client.export_model(args.policy)
                args.file.write_bytes(data)
                print(f"wrote {len(data)} bytes to {args.file}")
            elif args.action == "import":
                info = client.import_model(
                    args.policy, args.file.read_bytes(), args.replace_settings
                )
                print(f"imported {args.file} into {info.name} ({info.algorithm})")
            elif args.action == "reset":
                info = client.reset(args.policy)
                print(f"reset the model of {info.name} ({info.algorithm})")
            else:
                props = client.model_properties(args.policy)
                print(f"created {_utc(props.created_at)}, last modified {_utc(props.modified_at)}")
    except OSError as exc:
        print(f"bandit model {args.action}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BanditAPIError as exc:  # 404 unknown policy, 409 settings differ, 422 not a model file
        print(f"bandit model {args.action}: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.status in (404, 409, 413, 422) else EXIT_FAILURE
    except httpx.HTTPError as exc:
        print(f"bandit model {args.action}: cannot reach {args.url}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK
