import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

/** docker-compose.yml as the packaging tests read it (no Docker engine runs here). */
export interface ComposeService {
  image?: string;
  build?: string;
  command?: string[];
  working_dir?: string;
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  depends_on?: unknown;
}

export const compose = parse(readFileSync('docker-compose.yml', 'utf8')) as {
  services: Record<string, ComposeService>;
  volumes: Record<string, unknown>;
};
export const service = (name: string): ComposeService => {
  const s = compose.services[name];
  if (s === undefined) throw new Error(`docker-compose.yml has no service ${name}`);
  return s;
};
/** [source, target] of each mount of a service. */
export const mounts = (name: string): [string, string][] =>
  (service(name).volumes ?? []).map((v) => {
    const [source = '', target = ''] = v.split(':');
    return [source, target];
  });
