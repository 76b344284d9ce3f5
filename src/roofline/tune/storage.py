"""Where a study is stored: Optuna's RDB storage, `RUN/study.db` (SQLite) or a `--storage` URL
(PostgreSQL for several machines), the URL shown without its password.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from roofline.errors import UserError

STUDY_DB = "study.db"


def storage_url(run_dir: Path, storage: str | None) -> str:
    return storage or f"sqlite:///{(run_dir / STUDY_DB).resolve()}"


def shown_url(url: str) -> str:
    """The URL without its password, for printing and for tune.json."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def with_driver(url: str) -> str:
    """`postgresql://` names no driver, and SQLAlchemy 2.1 then wants psycopg 3: use psycopg2 when
    that is the one installed (psycopg2-binary is what the `tune` extra installs)."""
    import importlib.util

    if (
        url.startswith("postgresql://")
        and importlib.util.find_spec("psycopg") is None
        and importlib.util.find_spec("psycopg2") is not None
    ):
        return "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


def open_storage(url: str, attempts: int = 6) -> Any:
    """Optuna's RDBStorage on `url`; creating its tables is retried (concurrent creation races)."""
    import optuna

    url = with_driver(url)
    kwargs = (
        {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    )
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except ImportError as e:
            raise UserError(
                f"the storage {shown_url(url)} needs a database driver ({e}); for PostgreSQL: "
                "pip install psycopg2-binary"
            ) from None
        except Exception as e:  # sqlalchemy errors: a race on table creation, or a bad URL / server
            if attempt == attempts - 1:
                raise UserError(
                    f"cannot open the study storage {shown_url(url)} ({type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else e})"
                ) from None
            time.sleep(0.2 + 0.5 * random.random())
    raise AssertionError("unreachable")
