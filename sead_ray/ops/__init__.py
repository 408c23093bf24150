"""Running it: the memory plan, the monitor and the Grafana dashboard."""
