"""Code generated from Apache Pulsar's PulsarApi.proto (vendored in proto/pulsar) by `make proto`; never edited by hand."""
