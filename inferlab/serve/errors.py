"""Errors as an OpenAI client receives them: an HTTP status and ``{"error": {"message",
"type", "param", "code"}}``; and what the engine's own errors become (its bad-input errors a
400, anything else a 500). Pure Python: the driver uses it without FastAPI or pydantic."""
from __future__ import annotations

from ..errors import CapacityError, InferlabError


class APIError(Exception):
    """An error a client receives with an HTTP status and OpenAI's error body."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def engine_error(exc: BaseException, param: str | None = None) -> APIError:
    """What a client is told when the engine refuses or fails its request."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, CapacityError):
        return APIError(400, str(exc), param=param, code="context_length_exceeded")
    if isinstance(exc, InferlabError) and isinstance(exc, (ValueError, TypeError)):
        return APIError(400, str(exc), param=param, code="invalid_value")
    return APIError(500, f"the engine failed on this request ({type(exc).__name__}: {exc}); "
                    "the server goes on serving", "server_error", code="engine_error")
