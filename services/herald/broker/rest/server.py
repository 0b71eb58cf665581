"""The REST application and its server on the web port (HTTPS with the broker's certificate)."""

from __future__ import annotations

import ssl

from aiohttp import web

from herald.broker.rest import compaction, lookup, schemas, tenants, topics
from herald.broker.rest.app import CONTEXT, RestContext, middleware
from herald.common.errors import AddressInUseError


def make_app(context: RestContext) -> web.Application:
    app = web.Application(middlewares=[middleware], client_max_size=1024 * 1024)
    app[CONTEXT] = context
    tenants.add_routes(app.router)
    topics.add_routes(app.router)
    schemas.add_routes(app.router)
    compaction.add_routes(app.router)
    lookup.add_routes(app.router)
    return app


class RestServer:
    """The web port: the application on `host:port` (0: any free port), HTTPS with `ssl_context`."""

    def __init__(self, context: RestContext, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        self.context = context
        self.app = make_app(context)
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self.ssl_context)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise AddressInUseError.of("the web service (Pulsar's admin REST API)", self.host, self.port,
                                       "--web-port") from exc
        self._runner = runner
        # The bound port, when 0 asked for any free one.
        sockets = getattr(site._server, "sockets", None) or ()
        if sockets:
            self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext | None:
    """HTTPS with the broker's own certificate; None without one."""
    if not cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context
