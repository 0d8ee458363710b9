/**
 * The members of the cluster as one process sees them: the live ones, as its last heartbeat read
 * them, and those it presumes alive for a while after it regained the lease store.
 *
 * While the store is unreachable no process can heartbeat, so an outage longer than the
 * registration TTL lets every registration lapse: the first process back finds itself alone.
 * Counting only the live members, it would take every free partition, and hand most of them over
 * again a moment later when the others are back (each reconnects on its own schedule). So the
 * members this process saw live before it was cut off, and that are not live now, are presumed
 * alive for `graceMs` (one registration TTL, the time a process is given to say it is alive) after
 * the store answered again: their shares are left free for them meanwhile. A member that vanished
 * while this process heartbeated without a failure left or died: it is not presumed.
 */
export class Membership {
  private live: string[] = [];
  private readonly presumedUntil = new Map<string, number>();
  private cutOff = false;

  constructor(
    private readonly me: string,
    private readonly graceMs: number,
  ) {}

  /** The live members, this process among them (it may not be registered yet), sorted. */
  get members(): string[] {
    return this.live.includes(this.me) ? this.live : [...this.live, this.me].sort();
  }

  /** A heartbeat answered `live` at `now`. */
  seen(live: readonly string[], now: number): void {
    if (this.cutOff) {
      for (const m of this.live)
        if (m !== this.me && !live.includes(m)) this.presumedUntil.set(m, now + this.graceMs);
      this.cutOff = false;
    }
    for (const m of live) this.presumedUntil.delete(m);
    this.live = [...live];
  }

  /** A heartbeat failed: the next one that answers may find members that only could not heartbeat. */
  failed(): void {
    this.cutOff = true;
  }

  /** Members not live now but presumed alive at `now` (see the class comment). */
  presumed(now: number): string[] {
    for (const [m, until] of this.presumedUntil) if (until <= now) this.presumedUntil.delete(m);
    return [...this.presumedUntil.keys()].sort();
  }
}
