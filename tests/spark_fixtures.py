"""One local SparkSession for the whole test session (``spark`` marker tests only)."""

from __future__ import annotations

import os
import sys

import pytest


def spark_env() -> dict[str, str]:
    """What a driver or worker needs: our own interpreter (workers must see dropboxmq), loopback."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1"}


def make_session(app: str = "dropboxmq-tests", master: str = "local[2,4]"):
    """``local[2,4]``: two cores, and a failed task is retried (up to 4 attempts) as on a cluster."""
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.driver.memory", "1g")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from dropboxmq.spark import register

    register(spark)
    return spark


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    session = make_session()
    yield session
    session.stop()
