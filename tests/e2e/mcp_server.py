"""A real MCP server for the end-to-end tests: the Python SDK's MCPServer over streamable HTTP
(stateful sessions, SSE responses), with a fast tool, a slow one, one that fails and one that
says which session a call came in.

    python mcp_server.py <port>
"""

import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

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


SESSIONS = []


@server.tool()
def session_number(ctx: Context) -> str:
    """Which session (numbered in order of first use) this call came in."""
    session = (ctx.headers or {}).get("mcp-session-id", "")
    if session not in SESSIONS:
        SESSIONS.append(session)
    return str(SESSIONS.index(session) + 1)


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
