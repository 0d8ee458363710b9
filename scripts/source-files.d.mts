/** The code folders, lowest layer first (each imports only those before it). */
export declare const CODE_FOLDERS: readonly string[];
/** The files below `dir` whose names match `pattern` (TypeScript by default), declaration files left out. */
export declare function sourceFiles(dir: string, pattern?: RegExp): string[];
