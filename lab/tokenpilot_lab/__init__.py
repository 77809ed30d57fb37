"""TokenPilot's lab: the dev cluster, the local pod runner, the engine simulator and its
server, the load generator, the interference probe, the fleet simulator and the demo.

It imports the operator (`tokenpilot`), never the reverse. Its pure parts (`sim`, `fleet`,
`workload`) do no I/O, like the operator's core; the rest is the rig around them.
"""
