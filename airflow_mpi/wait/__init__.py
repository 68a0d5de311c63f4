"""The wait engine: one watch per namespace, verdicts, exactly-once launcher logs, failover read-back."""
