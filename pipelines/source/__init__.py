"""The Spark data source ``kafkastore`` and what it stands on: its options, the read
planning (ranges in, Spark tasks out), the Arrow schemas of what the jobs read and write,
and the Spark session."""
