import type { Alert } from '../../rules/index.js';
import type { AlertSink, DeadLetter, DeadLetterSink } from '../../service/index.js';

/**
 * An alert or dead-letter sink that keeps what it is handed, in order. While `hold` is set, each
 * `publish` returns it: backpressure, as a publisher with no room left.
 */
class RecordingSink<T> {
  readonly published: T[] = [];
  hold: Promise<void> | undefined;

  publish(item: T): Promise<void> | undefined {
    this.published.push(item);
    return this.hold;
  }
}

export class RecordingAlertSink extends RecordingSink<Alert> implements AlertSink {}

export class RecordingDeadLetterSink extends RecordingSink<DeadLetter> implements DeadLetterSink {
  /** The reasons of the dead letters handed over, in order. */
  reasons(): string[] {
    return this.published.map((l) => l.reason);
  }
}
