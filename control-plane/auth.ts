import { createHash, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import { ApiError, ApiErrorCode } from './errors.js';
import { ROLES, type ApiToken, type Role } from './options.js';

/** Who made a request: the token's name and role. */
export interface Principal {
  readonly name: string;
  readonly role: Role;
}

const sha256 = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

/**
 * Checks bearer tokens in constant time. Tokens are kept as SHA-256 digests, so every comparison
 * is between two 32-byte buffers (`timingSafeEqual` needs equal lengths, and comparing digests
 * does not leak a token's length); every token is compared, so the time does not depend on which
 * one matched either.
 */
export class TokenAuth {
  private readonly digests: { digest: Buffer; principal: Principal }[];

  constructor(tokens: readonly ApiToken[]) {
    this.digests = tokens.map((t) => ({
      digest: sha256(t.token),
      principal: { name: t.name, role: t.role },
    }));
  }

  /** The principal of an `Authorization` header value, or an ApiError (401). */
  authenticate(header: string | undefined): Principal {
    if (this.digests.length === 0)
      throw new ApiError(
        ApiErrorCode.Unauthorized,
        'the API has no tokens configured; set VIGIL_API_TOKENS (name:role:token) or VIGIL_API_TOKENS_FILE and restart',
      );
    const m = header === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (m === null)
      throw new ApiError(
        ApiErrorCode.Unauthorized,
        'send a bearer token: "Authorization: Bearer <token>"',
      );
    const presented = sha256(m[1] as string);
    let found: Principal | undefined;
    for (const d of this.digests) if (timingSafeEqual(d.digest, presented)) found = d.principal;
    if (found === undefined)
      throw new ApiError(ApiErrorCode.Unauthorized, 'the bearer token is not valid');
    return found;
  }
}

/** True when `role` includes `needed`. */
export function allows(role: Role, needed: Role): boolean {
  return ROLES.indexOf(role) >= ROLES.indexOf(needed);
}

/** The principal an authenticated request carries (set by {@link authMiddleware}). */
export function principalOf(res: Response): Principal {
  const p = res.locals.principal as Principal | undefined;
  if (p === undefined) throw new ApiError(ApiErrorCode.Unauthorized, 'not authenticated');
  return p;
}

/** Authenticates every request of the router it is mounted on. */
export function authMiddleware(auth: TokenAuth) {
  return (req: Request, res: Response, next: NextFunction): void => {
    try {
      res.locals.principal = auth.authenticate(req.get('authorization'));
      next();
    } catch (e) {
      next(e);
    }
  };
}

/** Requires a role for one route; 403 with the role needed and the role held. */
export function requireRole(needed: Role) {
  return (_req: Request, res: Response, next: NextFunction): void => {
    const p = res.locals.principal as Principal | undefined;
    if (p !== undefined && !allows(p.role, needed))
      return next(
        new ApiError(
          ApiErrorCode.Forbidden,
          `this needs the "${needed}" role; token "${p.name}" has "${p.role}"`,
          { details: { needed, role: p.role } },
        ),
      );
    next();
  };
}
