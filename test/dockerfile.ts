import { readFileSync } from 'node:fs';

/** One stage of the Dockerfile: its FROM line and its instructions. */
export interface DockerStage {
  readonly from: string;
  readonly lines: string[];
}

/** The Dockerfile's instructions, continuation lines joined, comments dropped, by stage. */
export function dockerStages(file = 'Dockerfile'): DockerStage[] {
  const lines = readFileSync(file, 'utf8')
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const stages: DockerStage[] = [];
  for (const l of lines) {
    if (/^FROM /i.test(l)) stages.push({ from: l, lines: [] });
    else stages.at(-1)?.lines.push(l);
  }
  return stages;
}

/** The exec-form array of an instruction such as `CMD ["node", …]`, after any options. */
export function execForm(line: string | undefined): string[] {
  const json = line?.slice(line.indexOf('['));
  const parsed = json === undefined ? undefined : (JSON.parse(json) as unknown);
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === 'string'))
    throw new Error(`not an exec-form instruction: ${line}`);
  return parsed;
}

/** `ENV a=1 b=2` lines of a stage, as one environment. */
export function stageEnv(stage: DockerStage): Record<string, string> {
  const env: Record<string, string> = {};
  for (const l of stage.lines.filter((x) => x.startsWith('ENV ')))
    for (const [, k = '', v = ''] of l.slice(4).matchAll(/(\w+)=(\S+)/g)) env[k] = v;
  return env;
}
