"""Letta's built-in web tools, run by the executor: `web_search` (Exa's search engine, with
the key from the agent's tool secrets or the server's `EXA_API_KEY`) and `fetch_webpage`
(Exa's contents with a key, else the page fetched by O and its main text extracted).
docs/builtin-tools.md says what an agent and an operator see.

| module | what |
|---|---|
| `settings.py` | the operator's settings: Exa's key and address, the egress policy, limits |
| `requests.py` | a call's arguments, checked and typed (pure) |
| `answers.py` | what the model is given back, in Letta's shapes (pure) |
| `pages.py` | a fetched page's bytes as markdown text (pure: trafilatura) |
| `exa.py` | Exa's search and contents, through its SDK |
| `fetch.py` | a page fetched from where the egress policy allows, redirects checked hop by hop |
| `tools.py` | one call: the arguments, the key, Exa or O's own fetch, the answer |
"""
