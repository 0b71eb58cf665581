"""Apache Pulsar's binary protocol, shared by the front ends that speak it (the broker's and the
proxy's): framing, who a CONNECT authenticates (auth), message ids and the mapping of Herald's errors
to Pulsar's. No I/O, no service logic."""
