"""The route model: Gateway API HTTPRoutes and Ingresses to each workload's HTTP listeners.

Pure functions of `ClusterState` (and the workloads compute found): which classes and
Gateways are ours and which workload serves them (`placement`), what each HTTPRoute and
Ingress asks for (`httproute`, `ingress`, with backends resolved in `backends`), ordered by
the Gateway API's precedence with conflicts dropped (`precedence`), each hostname of a
shared port held by one namespace (`ownership`), assembled per workload (`table`), and the
status documents the Lease holder writes (`status`). Every input that cannot be served is
reported (`RejectedInput`) and the rest is served (docs/annotations.md, "Routes"). It
reads the model, the snapshot types and the settings; compute, one layer up, calls it
(docs/design.md, "Layers").
"""
