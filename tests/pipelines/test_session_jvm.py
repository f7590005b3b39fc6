"""The session's JVM options: the defaults reach the running JVM, a user's own options
win over them, and the quiet log configuration stays either way. Read from the JVM
itself (tests/helpers/spark_jvm), never timed."""
from __future__ import annotations

from pipelines.source.session import JVM_DEFAULTS, resolve_settings
from tests.helpers.spark_jvm import (PARALLEL_COLLECTORS, SERIAL_COLLECTORS, jvm_settings,
                                     jvm_settings_of_a_new_session)


def test_the_sessions_jvm_runs_with_the_defaults(spark):
    settings = jvm_settings(spark)
    assert settings["TieredStopAtLevel"] == "1"            # C1 only
    assert set(settings["collectors"]) == SERIAL_COLLECTORS
    assert settings["log4j"].endswith("pipelines/log4j2.properties")


def test_a_users_java_options_come_after_the_defaults(clean_config_env):
    options = resolve_settings(extra_conf={
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4 -Dmine=1"})[1][
        "spark.driver.extraJavaOptions"].split()
    assert options[-2:] == ["-XX:TieredStopAtLevel=4", "-Dmine=1"]
    assert options[1:-2] == list(JVM_DEFAULTS)
    # Two collectors stop a JVM from starting: the user's choice replaces ours.
    options = resolve_settings(extra_conf={
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC"})[1]["spark.driver.extraJavaOptions"]
    assert "-XX:+UseSerialGC" not in options and options.endswith("-XX:+UseG1GC")


def test_a_users_java_options_in_the_config_file_win_in_the_running_jvm(tmp_path):
    conf_file = tmp_path / "kafkastore.yaml"
    conf_file.write_text('spark:\n  conf:\n    spark.driver.extraJavaOptions: '
                         '"-XX:TieredStopAtLevel=4 -XX:+UseParallelGC"\n')
    settings = jvm_settings_of_a_new_session(str(conf_file))
    assert settings["TieredStopAtLevel"] == "4"
    assert set(settings["collectors"]) == PARALLEL_COLLECTORS
    assert settings["log4j"].endswith("pipelines/log4j2.properties")   # kept beside them
