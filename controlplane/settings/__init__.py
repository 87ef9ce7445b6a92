"""How the computation reads the cluster: strict value parsers (`values`), the settings
table and its resolution (`table`), and the HAProxy workloads with their scope and peers
(`workloads`). Routes and compute both read them; they read only the model and the
snapshot types (docs/design.md, "Layers")."""
