// Windows guests: cloudbase-init user-data and the built-in PowerShell installer. Bootstrap
// values enter only through detail::powershell_string (single-quoted, or base64 for non-ASCII
// text), so the generated scripts are ASCII and read the same in any code page.

#include <string>

#include "userdata/internal.hpp"

namespace garm_edge::userdata {
namespace {

constexpr std::string_view kPs1Header = "#ps1_sysnative\n";

constexpr std::string_view kInstallerHeader = R"ps1(#ps1_sysnative
# Installs a GitHub Actions runner for garm: garm-edge's built-in installer, used when garm sent
# no runner_install_template. cloudbase-init runs it as an administrator.
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

)ps1";

constexpr std::string_view kEndOfPowershellValues = "# --- end of bootstrap values ---\n";

constexpr std::string_view kInstallerBody = R"ps1(
$RunnerDir = 'C:\actions-runner'
$CurrentStep = 'starting'
$JitServiceName = ''
[Net.ServicePointManager]::SecurityProtocol = [Net.ServicePointManager]::SecurityProtocol -bor [Net.SecurityProtocolType]::Tls12

function Get-GarmHeaders {
  return @{ Authorization = "Bearer $BearerToken" }
}

function Invoke-WithRetry([scriptblock]$Action) {
  for ($attempt = 1; ; $attempt++) {
    try {
      return & $Action
    } catch {
      if ($attempt -ge 5) { throw }
      Start-Sleep -Seconds 5
    }
  }
}

function Send-GarmJson([string]$Path, $Document) {
  $body = [System.Text.Encoding]::UTF8.GetBytes(($Document | ConvertTo-Json -Compress))
  $request = @{
    UseBasicParsing = $true; Method = 'Post'; Uri = "$CallbackUrl/$Path"
    Headers = (Get-GarmHeaders); ContentType = 'application/json'; Body = $body
  }
  Invoke-WithRetry { Invoke-WebRequest @request | Out-Null }
}

# ConvertTo-Json escapes every value, so messages may carry garm's values (the download URL).
function Send-Status([string]$Status, [string]$Message, $AgentId = $null) {
  Write-Host "garm status ${Status}: $Message"
  try {
    Send-GarmJson 'status' ([ordered]@{ status = $Status; message = $Message; agent_id = $AgentId })
  } catch {
    Write-Warning "could not report status $Status to garm: $_"
  }
}

function Send-InstallingStatus([string]$Message) {
  $script:CurrentStep = $Message
  Send-Status 'installing' $Message
}

function Save-Metadata([string]$Path, [string]$File) {
  Invoke-WithRetry {
    Invoke-WebRequest -UseBasicParsing -Uri "$MetadataUrl/$Path" -Headers (Get-GarmHeaders) -OutFile $File
  }
}

function Get-MetadataText([string]$Path) {
  $file = [System.IO.Path]::GetTempFileName()
  try {
    Save-Metadata $Path $file
    return [System.IO.File]::ReadAllText($file).Trim()
  } finally {
    Remove-Item -LiteralPath $file -Force
  }
}

# A Windows command line that the runner's argument parser splits back into exactly $Arguments,
# with no cmd.exe (config.cmd) in between, which would run anything after a '&' in a label.
function ConvertTo-WindowsArgument([string]$Value) {
  if ($Value -ne '' -and $Value -notmatch '[\s"]') { return $Value }
  return '"' + ($Value -replace '(\\*)"', '$1$1\"' -replace '(\\+)$', '$1$1') + '"'
}

function Invoke-NativeCommand([string]$FilePath, [string[]]$Arguments) {
  $startInfo = New-Object System.Diagnostics.ProcessStartInfo
  $startInfo.FileName = $FilePath
  $startInfo.Arguments = @($Arguments | ForEach-Object { ConvertTo-WindowsArgument $_ }) -join ' '
  $startInfo.WorkingDirectory = $RunnerDir
  $startInfo.UseShellExecute = $false
  $process = [System.Diagnostics.Process]::Start($startInfo)
  $process.WaitForExit()
  return $process.ExitCode
}

function Set-ProxyEnvironment {
  $settings = @{ HTTP_PROXY = $HttpProxyUrl; HTTPS_PROXY = $HttpsProxyUrl; NO_PROXY = $NoProxyList }
  foreach ($name in $settings.Keys) {
    if ($settings[$name]) { [Environment]::SetEnvironmentVariable($name, $settings[$name], 'Process') }
  }
  $proxy = if ($HttpsProxyUrl) { $HttpsProxyUrl } else { $HttpProxyUrl }
  if ($proxy) { [System.Net.WebRequest]::DefaultWebProxy = New-Object System.Net.WebProxy($proxy, $true) }
}

function Get-RunnerArchive([string]$Archive) {
  Send-InstallingStatus "downloading tools from $DownloadUrl"
  $headers = @{}
  if ($TempDownloadToken) { $headers['Authorization'] = "Bearer $TempDownloadToken" }
  Invoke-WithRetry { Invoke-WebRequest -UseBasicParsing -Uri $DownloadUrl -Headers $headers -OutFile $Archive }
}

function Test-RunnerArchive([string]$Archive) {
  if (-not $Sha256Checksum) {
    Send-InstallingStatus "garm sent no sha256_checksum for $DownloadUrl; the archive is not verified"
    return
  }
  Send-InstallingStatus 'verifying the sha256 checksum of the runner archive'
  $actual = (Get-FileHash -Algorithm SHA256 -LiteralPath $Archive).Hash.ToLowerInvariant()
  if ($actual -ne $Sha256Checksum) {
    throw "sha256 checksum mismatch for ${DownloadUrl}: expected $Sha256Checksum, got $actual"
  }
}

function Install-RunnerFiles {
  if (Test-Path -LiteralPath (Join-Path $RunnerDir 'config.cmd')) {
    Send-InstallingStatus "using cached runner found in $RunnerDir"
    return
  }
  $archive = Join-Path $env:TEMP 'garm-edge-actions-runner.zip'
  Get-RunnerArchive $archive
  Test-RunnerArchive $archive
  Send-InstallingStatus 'extracting runner'
  New-Item -ItemType Directory -Force -Path $RunnerDir | Out-Null
  Expand-Archive -LiteralPath $archive -DestinationPath $RunnerDir -Force
  Remove-Item -LiteralPath $archive -Force
}

function Register-JitRunner {
  Send-InstallingStatus 'configuring runner with JIT credentials'
  Save-Metadata 'credentials/runner' (Join-Path $RunnerDir '.runner')
  Save-Metadata 'credentials/credentials' (Join-Path $RunnerDir '.credentials')
  # The runner reads .credentials_rsaparams through DPAPI (machine scope) on Windows.
  $rsaParamsFile = Join-Path $RunnerDir '.credentials_rsaparams'
  Save-Metadata 'credentials/credentials_rsaparams' $rsaParamsFile
  Add-Type -AssemblyName System.Security
  $protected = [System.Security.Cryptography.ProtectedData]::Protect(
    [System.IO.File]::ReadAllBytes($rsaParamsFile), $null,
    [System.Security.Cryptography.DataProtectionScope]::LocalMachine)
  [System.IO.File]::WriteAllBytes($rsaParamsFile, $protected)
  $serviceName = Get-MetadataText 'system/service-name'
  if ($serviceName -notmatch '^[A-Za-z0-9][A-Za-z0-9@._:-]*$') {
    throw "garm sent an unusable service name: $serviceName"
  }
  $script:JitServiceName = $serviceName
  Set-Content -LiteralPath (Join-Path $RunnerDir '.service') -Value $serviceName -Encoding ASCII
  $binary = '"' + (Join-Path $RunnerDir 'bin\RunnerService.exe') + '"'
  New-Service -Name $serviceName -BinaryPathName $binary -DisplayName $serviceName -StartupType Automatic | Out-Null
}

function Register-RunnerWithToken {
  Send-InstallingStatus 'configuring runner'
  $token = Get-MetadataText 'runner-registration-token/'
  $arguments = @('configure', '--unattended', '--url', $RepoUrl, '--token', $token, '--name', $RunnerName,
    '--labels', $RunnerLabels, '--no-default-labels', '--ephemeral', '--runasservice')
  if ($RunnerGroup) { $arguments += @('--runnergroup', $RunnerGroup) }
  $listener = Join-Path $RunnerDir 'bin\Runner.Listener.exe'
  for ($attempt = 1; $attempt -le 3; $attempt++) {
    $exitCode = Invoke-NativeCommand $listener $arguments
    if ($exitCode -eq 0) { return }
    Send-Status 'installing' "runner configure failed with exit code $exitCode (attempt $attempt of 3)"
    Invoke-NativeCommand $listener @('remove', '--token', $token) | Out-Null
    Start-Sleep -Seconds 10
  }
  throw 'the runner could not be registered'
}

# The runner reads .env into its environment, so jobs use the proxy too.
function Write-ProxyEnvironment {
  $lines = @()
  if ($HttpProxyUrl) { $lines += "http_proxy=$HttpProxyUrl", "HTTP_PROXY=$HttpProxyUrl" }
  if ($HttpsProxyUrl) { $lines += "https_proxy=$HttpsProxyUrl", "HTTPS_PROXY=$HttpsProxyUrl" }
  if ($NoProxyList) { $lines += "no_proxy=$NoProxyList", "NO_PROXY=$NoProxyList" }
  if ($lines.Count -gt 0) { [System.IO.File]::AppendAllLines((Join-Path $RunnerDir '.env'), [string[]]$lines) }
}

function Get-RunnerAgentId {
  try {
    return (Get-Content -Raw -LiteralPath (Join-Path $RunnerDir '.runner') | ConvertFrom-Json).agentId
  } catch {
    return $null
  }
}

function Send-SystemInfo($AgentId) {
  try {
    $os = Get-CimInstance -ClassName Win32_OperatingSystem
    Send-GarmJson 'system-info/' ([ordered]@{ os_name = [string]$os.Caption; os_version = [string]$os.Version; agent_id = $AgentId })
  } catch {
    Write-Warning "could not send system info to garm: $_"
  }
}

function Install-Runner {
  Set-ProxyEnvironment
  Install-RunnerFiles
  Set-Location -LiteralPath $RunnerDir
  if ($UseJitConfig) { Register-JitRunner } else { Register-RunnerWithToken }
  Write-ProxyEnvironment
  if ($UseJitConfig) {
    Send-InstallingStatus 'starting runner service'
    Start-Service -Name $JitServiceName
  }
  $agentId = Get-RunnerAgentId
  Send-SystemInfo $agentId
  Send-Status 'idle' 'runner successfully installed' $agentId
}

try {
  Install-Runner
} catch {
  Send-Status 'failed' "runner installation failed while ${CurrentStep}: $($_.Exception.Message)"
  exit 1
}
)ps1";

/// Imports the bootstrap's CA bundle into LocalMachine\Root, as garm's Windows wrapper does.
constexpr std::string_view kImportCertificates =
    R"ps1(foreach ($encoded in $GarmEdgeCaCertificates) {
  $certificate = New-Object System.Security.Cryptography.X509Certificates.X509Certificate2(,[System.Convert]::FromBase64String($encoded))
  $store = New-Object System.Security.Cryptography.X509Certificates.X509Store('Root', 'LocalMachine')
  $store.Open('ReadWrite')
  $store.Add($certificate)
  $store.Close()
}
)ps1";

/// Win32-OpenSSH reads administrators' keys from one file that only SYSTEM and Administrators
/// may access (named by SID: group names are localized). Skipped when OpenSSH is not installed.
constexpr std::string_view kInstallSshKeys = R"ps1($sshDirectory = Join-Path $env:ProgramData 'ssh'
if (Test-Path -LiteralPath $sshDirectory) {
  $keysFile = Join-Path $sshDirectory 'administrators_authorized_keys'
  [System.IO.File]::AppendAllLines($keysFile, [string[]]$GarmEdgeSshKeys)
  icacls.exe $keysFile /inheritance:r /grant '*S-1-5-32-544:F' /grant '*S-1-5-18:F' | Out-Null
}
)ps1";

/// The install script runs from a file, as write_files + runcmd run it on Linux: a script with
/// a param() block cannot follow other statements. The BOM makes Windows PowerShell 5.1 read it
/// as UTF-8 rather than in the ANSI code page.
constexpr std::string_view kRunInstallScript =
    R"ps1($installScriptPath = Join-Path $env:TEMP 'garm-edge-install.ps1'
[System.IO.File]::WriteAllText($installScriptPath, $GarmEdgeInstallScript, (New-Object System.Text.UTF8Encoding $true))
& powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -File $installScriptPath
$installExitCode = $LASTEXITCODE
Remove-Item -LiteralPath $installScriptPath -Force -ErrorAction SilentlyContinue
exit $installExitCode
)ps1";

void assign_powershell(std::string& script, std::string_view name, std::string_view value) {
  script.append("$").append(name).append(" = ").append(detail::powershell_string(value));
  script.append("\n");
}

std::string array_literal(const std::vector<std::string>& values) {
  std::string out = "@(";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += (i == 0 ? "" : ", ") + detail::powershell_string(values[i]);
  }
  return out + ")";
}

}  // namespace

std::string builtin_windows_install_script(const wire::BootstrapInstance& bootstrap,
                                           const GuestEndpoints& endpoints) {
  detail::check_endpoint_urls(endpoints);
  const auto& tool = select_tool(bootstrap);
  const auto& proxy = detail::checked_proxy_config(bootstrap);

  std::string script(kInstallerHeader);
  assign_powershell(script, "CallbackUrl", callback_base(endpoints.callback_url));
  assign_powershell(script, "MetadataUrl",
                    detail::without_trailing_slashes(endpoints.metadata_url));
  assign_powershell(script, "BearerToken", bootstrap.instance_token);
  assign_powershell(script, "RepoUrl", bootstrap.repo_url);
  assign_powershell(script, "RunnerName", bootstrap.name);
  assign_powershell(script, "RunnerLabels", detail::joined_labels(bootstrap));
  assign_powershell(script, "RunnerGroup", bootstrap.github_runner_group);
  const bool cached = !endpoints.runner_archive_url.empty();
  assign_powershell(script, "DownloadUrl",
                    cached ? endpoints.runner_archive_url : detail::required_download_url(tool));
  assign_powershell(script, "TempDownloadToken",
                    cached ? "" : tool.temp_download_token.value_or(""));
  assign_powershell(script, "Sha256Checksum", detail::normalized_sha256(tool));
  script += bootstrap.jit_config_enabled ? "$UseJitConfig = $true\n" : "$UseJitConfig = $false\n";
  assign_powershell(script, "HttpProxyUrl", proxy.http_proxy);
  assign_powershell(script, "HttpsProxyUrl", proxy.https_proxy);
  assign_powershell(script, "NoProxyList", proxy.no_proxy);
  script += kEndOfPowershellValues;
  script += kInstallerBody;
  return script;
}

std::string render_windows_user_data(const wire::BootstrapInstance& bootstrap,
                                     std::string_view install_script) {
  std::string user_data(kPs1Header);
  user_data += "# garm-edge user-data for cloudbase-init, which runs it as an administrator.\n";
  user_data += "$ErrorActionPreference = 'Stop'\n";
  if (bootstrap.ca_cert_bundle && !bootstrap.ca_cert_bundle->empty()) {
    std::vector<std::string> bodies;
    for (const auto& certificate : detail::pem_certificates(*bootstrap.ca_cert_bundle)) {
      bodies.push_back(detail::pem_body(certificate));
    }
    user_data += "$GarmEdgeCaCertificates = " + array_literal(bodies) + "\n";
    user_data += kImportCertificates;
  }
  const auto ssh_keys = detail::checked_ssh_keys(bootstrap);
  if (!ssh_keys.empty()) {
    user_data += "$GarmEdgeSshKeys = " + array_literal(ssh_keys) + "\n";
    user_data += kInstallSshKeys;
  }
  user_data += "$GarmEdgeInstallScript = " + detail::powershell_string(install_script) + "\n";
  user_data += kRunInstallScript;
  return user_data;
}

}  // namespace garm_edge::userdata
