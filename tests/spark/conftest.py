"""One local[2] SparkSession for every Spark test; skipped cleanly without pyspark or Java."""

import os
import shutil
import sys

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (make test installs it)")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (make test installs it)")


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from streamdb.spark import register
    session = (SparkSession.builder.master("local[2]").appName("streamdb-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
               .config("spark.ui.showConsoleProgress", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def url(server):
    return f"redis://127.0.0.1:{server.port}"


@pytest.fixture
def checkpoint(tmp_path):
    d = tmp_path / "checkpoint"
    return str(d)
