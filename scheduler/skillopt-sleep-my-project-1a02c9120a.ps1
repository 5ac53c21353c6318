# Managed by skillopt-sleep (schedule install); remove with: skillopt-sleep schedule remove --task-scheduler --project /home/you/code/my-project
# Runs one skillopt-sleep night for /home/you/code/my-project (task \skillopt-sleep-my-project-1a02c9120a).
# Task Scheduler starts it without your login environment: put what the night
# needs (API keys, a PATH with the agent CLIs) in skillopt-sleep-env.ps1 beside this
# file, one line each, e.g.  $env:OPENAI_API_KEY = '...'
$envScript = Join-Path $PSScriptRoot 'skillopt-sleep-env.ps1'
if (Test-Path -LiteralPath $envScript) { . $envScript }
$log = '/home/you/.local/state/skillopt-sleep/projects/my-project-1a02c9120a/scheduled.log'
New-Item -ItemType Directory -Force -Path (Split-Path -Parent $log) | Out-Null
# Appended as UTF-8 by .NET: Windows PowerShell 5.1's >> writes UTF-16 and turns
# each line on stderr into an error record; here each line is kept as its text.
$ErrorActionPreference = 'Continue'
$utf8 = New-Object System.Text.UTF8Encoding $false
function Write-Log([string]$line) {
    [System.IO.File]::AppendAllText($log, $line + [Environment]::NewLine, $utf8)
}
$env:PYTHONUTF8 = '1'
try { [Console]::OutputEncoding = $utf8 } catch { }
try {
    & '/home/you/.venvs/skillopt/bin/python' '-m' 'skillopt_sleep' 'once' '--jitter' '900' '--project' '/home/you/code/my-project' 2>&1 | ForEach-Object { Write-Log "$_" }
} catch {
    Write-Log "skillopt-sleep could not start: $_"
    exit 1
}
exit $LASTEXITCODE
