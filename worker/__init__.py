"""One run in its own process: `python -m worker` (see worker.main for the protocol).

main        stdin/stdout protocol, exit codes          process   fd 1, PDEATHSIG, title
agent       routes, escalation, result                 loop      the bounded tool loop
router      the auto-router's triggers (pure)          budget    budget verdicts (pure)
memory      session/persistent/shared memory           tools     whitelist + sandbox calls
output      output file and webhook                    commandroutine  command routines
shellpolicy a routine's sandbox ShellPolicy            sandboxcli  `vinos-routine sandbox`'s exec
providers/  Anthropic (SDK, lazily) and Ollama         webclient every HTTP client (httpx2)
connector   where any connection may go: resolved, classed, a local listener's owner checked
"""
