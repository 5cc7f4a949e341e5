"""One local SparkSession for the whole test session (``spark`` marker tests only)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

#: The top-level module a (non-editable) install puts on the path, where Spark looks for it.
DISCOVERY_MODULE = Path(__file__).resolve().parent.parent / "reference" / "pyspark_dropboxmq.py"


def installed_site() -> str:
    """A directory laid out as ``pip install 'dropboxmq[spark]'`` lays out site-packages for
    Spark's data source discovery (the editable install used for development does not)."""
    site = Path(tempfile.mkdtemp(prefix="dropboxmq-site-"))
    (site / DISCOVERY_MODULE.name).symlink_to(DISCOVERY_MODULE)
    return str(site)


_SITE: list[str] = []


def spark_env() -> dict[str, str]:
    """What a driver or worker needs: our own interpreter (workers must see dropboxmq), loopback,
    and the installed layout on PYTHONPATH, so that ``format("dropboxmq")`` needs no register call."""
    if not _SITE:
        _SITE.append(installed_site())
    path = os.pathsep.join(p for p in (_SITE[0], os.environ.get("PYTHONPATH", "")) if p)
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": path}


def make_session(app: str = "dropboxmq-tests", master: str = "local[2,4]"):
    """``local[2,4]``: two cores, and a failed task is retried (up to 4 attempts) as on a cluster.
    No ``register`` call: the session finds the data source as an installed one would."""
    env = spark_env()
    saved = os.environ.get("PYTHONPATH")
    os.environ.update(env)  # the JVM (and so every Python worker) inherits it at launch
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.driver.memory", "1g")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if saved is None:  # only the JVM needs it; this process keeps its own import path
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved
    return spark


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    session = make_session()
    yield session
    session.stop()
