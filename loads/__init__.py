"""The life of a load, owned in one place: plan and claim its label, stage its body, run it (group commit or a
plain run), commit or abort, clean up. Below the app, above `loaders` (body staging) and `spark_runner` (the
Spark job), which never import each other."""
