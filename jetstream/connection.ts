/** The NATS settings the service and the control plane share. */
export interface NatsSettings {
  /** NATS server URL(s), comma-separated. */
  readonly natsUrl: string;
  /** The user to connect as; '' for a server without users. */
  readonly natsUser: string;
  readonly natsPassword: string;
}

/** How to connect to NATS: the server, and the user when one is set. */
export function natsConnection(o: NatsSettings): {
  servers: string;
  user?: string;
  pass?: string;
} {
  return o.natsUser === ''
    ? { servers: o.natsUrl }
    : { servers: o.natsUrl, user: o.natsUser, pass: o.natsPassword };
}
