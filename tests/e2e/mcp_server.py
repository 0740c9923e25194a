"""A real MCP server for the end-to-end tests: the Python SDK's MCPServer over streamable HTTP
(stateful sessions, SSE responses), with a fast tool, a slow one and one that fails.

    python mcp_server.py <port>
"""

import sys

import anyio
from mcp.server.mcpserver import MCPServer

GLOSSARY = {
    "edge": "computing close to the user, in many small data centres",
    "isolate": "a lightweight V8 sandbox; one process runs thousands",
}

server = MCPServer("glossary")


@server.tool()
def lookup(term: str) -> str:
    """Looks a term up in the glossary."""
    return GLOSSARY.get(term.lower(), f"no entry for {term}")


@server.tool()
async def slow_lookup(term: str, seconds: float) -> str:
    """Looks a term up, slowly."""
    await anyio.sleep(seconds)
    return GLOSSARY.get(term.lower(), f"no entry for {term}")


@server.tool()
def broken(term: str) -> str:
    """Always fails."""
    raise ValueError(f"the glossary is on fire (looking for {term})")


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
