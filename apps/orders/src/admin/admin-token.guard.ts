import { type CanActivate, type ExecutionContext, Injectable } from '@nestjs/common';
import { InjectOrdersConfig, type OrdersConfig } from '../config/orders.config.js';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { isAdminBearer } from './admin-token.js';

interface AdminRequest {
  headers: Record<string, string | string[] | undefined>;
}

interface ChallengeSink {
  setHeader(name: string, value: string): unknown;
}

/**
 * Lets a request through only with `Authorization: Bearer <ADMIN_TOKEN>`; anything else is a
 * 401 `admin-unauthorized` problem with a `WWW-Authenticate: Bearer` challenge (RFC 6750). It
 * runs before pipes, so nothing of the request is read before the token is checked.
 */
@Injectable()
export class AdminTokenGuard implements CanActivate {
  constructor(@InjectOrdersConfig('admin') private readonly admin: OrdersConfig['admin']) {}

  canActivate(context: ExecutionContext): boolean {
    const { token } = this.admin;
    const http = context.switchToHttp();
    if (token !== undefined && isAdminBearer(http.getRequest<AdminRequest>().headers.authorization, token)) {
      return true;
    }
    http.getResponse<ChallengeSink>().setHeader('WWW-Authenticate', 'Bearer realm="orders-admin"');
    throw new ProblemException('adminUnauthorized', 'Send Authorization: Bearer <ADMIN_TOKEN>.');
  }
}
