"""Bad options are refused before anything is read, with an error naming the option."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from tests.conftest import StandaloneProcess
from tests.spark.helpers import read


@pytest.mark.parametrize(("options", "named"), [
    ({"topic": "t", "startingOfsets": "earliest"}, "did you mean startingOffsets"),
    ({"topic": "t", "topics": "a,b"}, "topicsPattern"),
    ({"topic": "t", "startingOffsets": "{not json"}, "startingOffsets"),
    ({"topic": "t", "startingOffsets": '{"t": "1:x"}'}, "startingOffsets"),
    ({"topic": "t", "failOnDataLoss": "maybe"}, "failondataloss"),
    ({"topic": "bad name!"}, "topic"),
    ({"topicsPattern": "orders-.*"}, "topicsPattern"),
    ({"topic": "t", "endingOffsets": '{"persistent://public/default/other": "1:0"}'}, "endingOffsets"),
])
def test_a_bad_read_option_is_refused_naming_it(
    spark: SparkSession, herald: StandaloneProcess, options: dict[str, str], named: str,
) -> None:
    with pytest.raises(PySparkException) as failure:
        read(spark, herald.proxy_url, **options).collect()
    assert named.lower() in str(failure.value).lower()


def test_a_missing_service_url_and_a_stream_with_an_end_are_refused(spark: SparkSession) -> None:
    with pytest.raises(PySparkException, match="service_url"):
        spark.read.format("herald").option("topic", "t").load().collect()
    with pytest.raises(PySparkException, match="endingOffsets"):
        spark.readStream.format("herald").option("service_url", "herald://127.0.0.1:1").option("topic", "t") \
            .option("endingOffsets", "latest").load().writeStream.format("console").start().awaitTermination()


def test_writing_without_a_value_column_or_a_topic_is_refused(spark: SparkSession, herald: StandaloneProcess) -> None:
    with pytest.raises(PySparkException, match="value"):
        spark.createDataFrame([("x",)], "payload string").write.format("herald") \
            .option("service_url", herald.proxy_url).option("topic", "t").mode("append").save()
    with pytest.raises(PySparkException, match="option topic"):
        spark.createDataFrame([("x",)], "value string").write.format("herald") \
            .option("service_url", herald.proxy_url).mode("append").save()
