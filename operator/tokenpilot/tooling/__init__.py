"""Developer and demo tooling: the dev cluster, the local pod runner, the engine-simulator
server, the load generator and the demo."""
