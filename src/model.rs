//! Pure data types of the delivery protocol: positions, shards, checkpoint ranges.
