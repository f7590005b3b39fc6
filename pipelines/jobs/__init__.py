"""The jobs that write warehouse tables from the log: the executors' reader and writer
(``executor_io``), the driver's write engine, and the jobs built on them."""
