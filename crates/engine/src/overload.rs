//! Python's operators on tensors. Operands taken by value are dropped right
//! after the op, as CPython's `BINARY_OP` drops its operands (left, then
//! right); operands taken by reference stay alive.
//!
//! These panic on an error (shape mismatch, out of memory), as an uncaught
//! Python exception ends a script; use the `Tensor` methods (`add`, `mul`,
//! ...) to handle errors.

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::ops::Scalar;
use crate::tensor::Tensor;

fn ok(r: crate::error::Result<Tensor>) -> Tensor {
    match r {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

macro_rules! tensor_tensor {
    ($tr:ident, $f:ident, $m:ident) => {
        impl $tr<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $f(self, rhs: &Tensor) -> Tensor {
                ok(Tensor::$m(self, rhs))
            }
        }
        impl $tr<Tensor> for &Tensor {
            type Output = Tensor;
            fn $f(self, rhs: Tensor) -> Tensor {
                let out = ok(Tensor::$m(self, &rhs));
                drop(rhs);
                out
            }
        }
        impl $tr<&Tensor> for Tensor {
            type Output = Tensor;
            fn $f(self, rhs: &Tensor) -> Tensor {
                let out = ok(Tensor::$m(&self, rhs));
                drop(self);
                out
            }
        }
        impl $tr<Tensor> for Tensor {
            type Output = Tensor;
            fn $f(self, rhs: Tensor) -> Tensor {
                let out = ok(Tensor::$m(&self, &rhs));
                drop(self);
                drop(rhs);
                out
            }
        }
    };
}

tensor_tensor!(Add, add, add);
tensor_tensor!(Sub, sub, sub);
tensor_tensor!(Mul, mul, mul);
tensor_tensor!(Div, div, div);

macro_rules! tensor_scalar {
    ($tr:ident, $f:ident, $m:ident, $rm:ident) => {
        impl $tr<Scalar> for &Tensor {
            type Output = Tensor;
            fn $f(self, rhs: Scalar) -> Tensor {
                ok(Tensor::$m(self, rhs))
            }
        }
        impl $tr<Scalar> for Tensor {
            type Output = Tensor;
            fn $f(self, rhs: Scalar) -> Tensor {
                let out = ok(Tensor::$m(&self, rhs));
                drop(self);
                out
            }
        }
        impl $tr<&Tensor> for Scalar {
            type Output = Tensor;
            fn $f(self, rhs: &Tensor) -> Tensor {
                ok(Tensor::$rm(rhs, self))
            }
        }
        impl $tr<Tensor> for Scalar {
            type Output = Tensor;
            fn $f(self, rhs: Tensor) -> Tensor {
                let out = ok(Tensor::$rm(&rhs, self));
                drop(rhs);
                out
            }
        }
    };
}

// `s + x` is `x.__radd__(s)` = `add(x, s)`; `s * x` likewise.
tensor_scalar!(Add, add, add_scalar, add_scalar);
tensor_scalar!(Mul, mul, mul_scalar, mul_scalar);
// `s - x` is `rsub(x, s)`; `s / x` is `x.reciprocal() * s`.
tensor_scalar!(Sub, sub, sub_scalar, rsub_scalar);
tensor_scalar!(Div, div, div_scalar, rdiv_scalar);

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        ok(Tensor::neg(self))
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        let out = ok(Tensor::neg(&self));
        drop(self);
        out
    }
}
