"""Bottom layer: the Doris table model, the specs that cross layers, catalog, transactions and commits."""
