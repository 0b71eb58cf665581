"""Client code generated from etcd v3's gRPC API (vendored in proto/etcd) by `make proto`; never edited by hand."""
