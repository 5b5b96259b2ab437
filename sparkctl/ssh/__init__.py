"""SSH fan-out for the fast reads (status, logs, bundle, stage progress): host keys always verified."""
