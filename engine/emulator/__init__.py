"""An emulated vLLM replica: the replica model on the wall clock behind vLLM's HTTP API.

Public API: `EmulatorSettings`, `EmulatorServer` (start on a port, `url`,
`close`), `create_app` (aiohttp app), `serve_forever` (the CLI's loop).
"""

from engine.emulator.server import EmulatorServer, EmulatorSettings, create_app, serve_forever

__all__ = ["EmulatorServer", "EmulatorSettings", "create_app", "serve_forever"]
