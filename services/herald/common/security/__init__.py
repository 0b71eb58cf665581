"""Authentication and credentials over the transport: JWT keys and tokens, the tokens and
certificates a client presents, the server interceptors that authenticate calls and authorize them,
each service's security settings (settings.py: plain data, no gRPC) and what it builds from them.
Must not know: any service's decisions (who may do what is herald.metadata.authorization's)."""
