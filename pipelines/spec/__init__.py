"""The job specs: the jobs' config, load specs, table layouts and offset values.

Stdlib, yaml and the light parts of kafkastore only (no Spark, pyiceberg or pyarrow):
the Airflow DAG file imports these at parse time.
"""
