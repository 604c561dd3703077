import type { SandboxCapabilities } from "@proctor/sandbox";
import { fileAuditSupport } from "./file-audit";

/**
 * What a Docker sandbox can do (see SandboxCapabilities). fileAudit depends on this host and on
 * where the daemon behind `modem` runs: it is worked out (and the audit helper built) the first
 * time it is read, never when nobody asks.
 */
export function dockerCapabilities(modem: unknown): SandboxCapabilities {
  return Object.freeze({
    killAll: true, changes: true, trustedTools: true, files: true, network: true, diskUsage: true, processes: true, joinNetwork: true,
    get fileAudit() {
      return fileAuditSupport(modem).helper !== undefined;
    },
    get fileAuditUnavailable() {
      return fileAuditSupport(modem).reason;
    },
  });
}
