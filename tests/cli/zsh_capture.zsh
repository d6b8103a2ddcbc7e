# zsh -f zsh_capture.zsh FPATH_DIR 'command line'
# Types the command line and TAB into an interactive zsh on a pseudo-terminal (zpty) with the
# completion functions of FPATH_DIR, and prints every candidate zsh offers, one a line.
# compadd is wrapped to print what it is given; comppostfuncs=(exit) ends the shell after.
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PROMPT=''; RPROMPT=''"
zpty -w z "fpath=($1 \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z "zstyle ':completion:*' list-grouped false; zstyle ':completion:*' insert-tab false"
# "C""AND" so that the shell echoing this definition does not itself print a marker.
zpty -w z 'compadd () {
  if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi
  typeset -a __hits
  builtin compadd -A __hits "$@"
  local h; for h in $__hits; do print -r -- "C""AND:$h"; done
}'
zpty -w z 'comppostfuncs=(exit)'
zpty -w z "$2"$'\t'
local out=""
while zpty -r z chunk; do out+=$chunk; done
print -r -- $out | tr -d '\r' | grep -ao 'CAND:[^[:cntrl:]]*' | sed 's/^CAND://' | sort -u
