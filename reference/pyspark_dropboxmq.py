"""Spark finds the ``dropboxmq`` data source through this module, with no register call.

Spark (4.0+) imports every top-level module named ``pyspark_*`` on its Python path and registers
its ``DefaultSource`` under ``DefaultSource.name()``: ``pip install 'dropboxmq[spark]'`` installs
this module, so ``spark.read.format("dropboxmq")`` works at once.  (An editable install does not
put it on the path Spark scans: call ``dropboxmq_spark.register(spark)`` there.)
"""

from dropboxmq_spark import DropboxMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
