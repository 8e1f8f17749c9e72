"""`vega-tui serve`: the dashboard in a browser, behind a token (the `web` extra).

auth.py checks every request (token, cookie, Host, Origin); page.py is the terminal page;
server.py runs one dashboard process per browser session through Textual's web driver;
cli.py starts it all.
"""
