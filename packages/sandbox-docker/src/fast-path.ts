import type { Logger } from "@proctor/schema";
import { openXattrReader, type NoXattrReader, type XattrChoice, type XattrReader } from "./xattrs";

/** Why no container of a runtime can have its changes read on this host, and what would fix it. */
export type NoFastPath = NoXattrReader;

/**
 * A runtime's host-side reading of its containers' changes (`DockerSandbox.changes()`): the
 * xattr reader, opened once, and the one warning a runtime gives when its listings go to the
 * daemon for a reason that holds for all of them (no reader, a remote daemon, another storage
 * driver), with what the first such listing cost.
 */
export class ChangesFastPath {
  private reader: Promise<XattrReader | NoXattrReader> | undefined;
  private warned = false;

  constructor(
    private readonly choice: XattrChoice,
    private readonly logger: Logger,
  ) {}

  xattrs(): Promise<XattrReader | NoXattrReader> {
    this.reader ??= openXattrReader(this.choice);
    return this.reader;
  }

  /** A listing went to the daemon because of `why`; the first one of this runtime is said as a warning. */
  slow(why: NoFastPath, daemonMs: number): void {
    if (this.warned) return;
    this.warned = true;
    this.logger.warn(slowChangesWarning(why, daemonMs));
  }
}

/** The one line that says the slow path is taken, what it costs and how to leave it. */
function slowChangesWarning(why: NoFastPath, daemonMs: number): string {
  return (
    `Docker: container file changes are listed by the daemon, which walks the whole image ` +
    `(${(daemonMs / 1000).toFixed(2)} s for this first listing, up to two per trial; read from the overlay layers on this host it takes milliseconds), ` +
    `because ${why.unavailable}. Fix: ${why.fix}`
  );
}
