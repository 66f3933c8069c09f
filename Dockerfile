# The orders service. Build: docker build -t orders .   Run: see docker-compose.yml
# Node.js 24, the active LTS: the runtime the project develops, tests and benchmarks on.
FROM node:24-alpine AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The library is an npm workspace: npm ci links it into node_modules/nestjs-idempotency.
COPY libs/idempotency/package.json ./libs/idempotency/
RUN npm ci --no-audit --no-fund
COPY nest-cli.json tsconfig.json ./
COPY apps ./apps
COPY libs ./libs
RUN npm run build && npm prune --omit=dev

FROM node:24-alpine
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/libs/idempotency/package.json ./libs/idempotency/
COPY --from=build /app/libs/idempotency/dist ./libs/idempotency/dist
COPY --from=build /app/dist ./dist
# Only used when DATABASE_URL is unset (embedded sql.js file).
RUN mkdir -p /app/.data && chown node:node /app/.data
USER node
EXPOSE 3000
CMD ["node", "dist/apps/orders/src/main.js"]
