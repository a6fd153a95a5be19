"""The NATS fleet: ``NatsAgentHost`` serving the protocol on NATS subjects with failover."""
