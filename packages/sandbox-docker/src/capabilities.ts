/** What every Docker sandbox can do (see SandboxCapabilities). */
export const DOCKER_CAPABILITIES = Object.freeze({
  killAll: true, changes: true, trustedTools: true, files: true, network: true, diskUsage: true, processes: true, joinNetwork: true,
});
