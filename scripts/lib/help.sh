# Shared by the shell scripts whose options their header comment lists in full.
# Usage: source scripts/lib/help.sh; answer_help "$0" "$@"
# When an argument is -h or --help: print the header comment (the lines after the shebang up to
# the first line that is not a comment, without their "# ") and exit 0, before any work.

answer_help() {
    local script=$1 arg
    shift
    for arg in "$@"; do
        case $arg in
            -h | --help)
                awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$script"
                exit 0 ;;
        esac
    done
}
