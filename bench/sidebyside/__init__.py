"""Side by side (issue 35): helix and Pydantic AI on the same durable engine, one run."""
