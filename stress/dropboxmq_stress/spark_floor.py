"""PySpark's own floor under a streaming drain: an ``availableNow`` query over a Python data
source that touches no file (100 rows made in memory) into Parquet, timed as ``spark_bench``
times the dropboxmq drain.  Whatever this takes, every Python streaming source pays per query
(the source's Python process Spark starts, query start and stop, one micro-batch); the
dropboxmq drain cannot be faster than it.

``spark_bench`` reports it beside the dropboxmq drain of 100 messages (its warm-up).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

SCHEMA = "id long, text string"


class _Rows(InputPartition):
    def __init__(self, rows: int):
        self.rows = rows


class MemoryStreamReader(DataSourceStreamReader):
    """One batch of ``rows`` rows, then nothing: the least a Python streaming source can do."""

    def __init__(self, options: Any):
        self.rows = int(options.get("rows", "100"))

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return {"batch": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Rows(self.rows)] if end["batch"] > start["batch"] else []

    def read(self, partition: _Rows) -> Iterator[tuple]:  # type: ignore[override]
        for i in range(partition.rows):
            yield i, f"m{i}"

    def commit(self, end: dict) -> None:
        pass


class MemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "memoryfloor"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MemoryStreamReader(self.options)


def floor_seconds(spark: Any, tmp: str, rows: int = 100, repeat: int = 2) -> list[float]:
    """Seconds of ``repeat`` availableNow drains of the in-memory source into Parquet."""
    spark.dataSource.register(MemorySource)
    seconds = []
    for k in range(repeat):
        ckpt = str(Path(tmp) / f"floor-{k}-ck")
        t = time.perf_counter()
        (spark.readStream.format("memoryfloor").option("rows", str(rows)).load()
         .writeStream.format("parquet").option("path", str(Path(tmp) / f"floor-{k}-sink"))
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start().awaitTermination())
        seconds.append(round(time.perf_counter() - t, 2))
    return seconds
