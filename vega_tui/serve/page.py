"""The page a browser gets: textual-serve's terminal script and styles, and no address of ours.

The websocket address is built in the browser from `window.location`, so the page works under
whatever host and port the browser used (an SSH tunnel's local port, a proxy); textual-serve's own
page writes the server's address into the HTML. Fonts come from this server, never another site.
"""

from __future__ import annotations

import html

PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>{title}</title>
<link rel="stylesheet" href="/static/css/xterm.css">
<script src="/static/js/textual.js"></script>
<style>
@font-face {{ font-family: "Roboto Mono";
  src: url("/static/fonts/RobotoMono-VariableFont_wght.ttf"); }}
html, body {{ margin: 0; height: 100%; background: #0c181f; }}
.textual-terminal {{ width: 100vw; height: 100vh; }}
.ended {{ display: none; position: absolute; inset: 0; align-items: center;
  justify-content: center; flex-direction: column; color: #eee;
  font: 16px "Roboto Mono", monospace; background: #0c181fe0; }}
body.-closed .ended {{ display: flex; }}
.ended button {{ margin: 16px; padding: 8px 24px; font: inherit; }}
</style>
</head>
<body>
<div class="ended">
  <div>The dashboard session ended (training goes on).</div>
  <button type="button" onclick="window.location.reload()">Open it again</button>
</div>
<div id="terminal" class="textual-terminal" data-font-size="{font_size}"></div>
<script>
// The websocket of this very page: same host and port as the address bar, wss under https.
(function () {{
  const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  document.getElementById("terminal").dataset.sessionWebsocketUrl =
    scheme + window.location.host + "{ws_path}";
}})();
</script>
</body>
</html>
"""


def render(title: str, font_size: int, ws_path: str) -> str:
    return PAGE.format(title=html.escape(title), font_size=int(font_size), ws_path=ws_path)
