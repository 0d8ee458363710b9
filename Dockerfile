# Vigil service image. Build: docker build -t vigil .   Run: see docker-compose.yml.
# The build stage type-checks, compiles the TypeScript to dist/ (scripts/build.mjs, what
# `npm start` runs too), then drops the dev dependencies.

FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY rules ./rules
COPY protocol ./protocol
COPY jetstream ./jetstream
COPY service ./service
COPY control-plane ./control-plane
COPY app ./app
COPY scripts ./scripts
COPY config ./config
# Type errors fail the build here rather than at start-up.
RUN npx tsc --noEmit -p .
RUN npm run build
RUN npm prune --omit=dev --no-audit --no-fund

FROM node:22-bookworm-slim AS runtime
ENV NODE_ENV=production \
    VIGIL_HTTP_HOST=0.0.0.0 \
    VIGIL_HTTP_PORT=8080
WORKDIR /app
COPY --from=build /app/package.json /app/package-lock.json /app/tsconfig.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/rules ./rules
COPY --from=build /app/protocol ./protocol
COPY --from=build /app/jetstream ./jetstream
COPY --from=build /app/service ./service
COPY --from=build /app/control-plane ./control-plane
COPY --from=build /app/app ./app
COPY --from=build /app/scripts ./scripts
COPY --from=build /app/config ./config
COPY --from=build /app/dist ./dist
# The image's files belong to root and are read-only for the service, which runs as "node".
# Only .vigil/ is its own: without VIGIL_API_TOKENS, start.ts writes a session admin token there
# (docker compose exec vigil cat .vigil/api-token).
RUN mkdir /app/.vigil && chown node:node /app/.vigil
USER node
EXPOSE 8080
# Ready = every worker caught up with CONTROL and checkpointing (what /readyz answers 200 for).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.VIGIL_HTTP_PORT}/readyz`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# What `npm start -- --no-demo` runs once its dependencies are there and dist/ is built (they
# are, in the image): with NATS_URL and REDIS_URL set it starts no servers of its own.
CMD ["node", "--enable-source-maps", "dist/scripts/start.js", "--no-demo"]
