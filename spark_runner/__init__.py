"""Spark jobs: the load (parse → map → filter → sign/sequence → in-batch dedup → rowset), the merge, queries."""
