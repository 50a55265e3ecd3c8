//! Element types and reduction operations, named as nccl-tests names them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataType {
    Int8,
    Uint8,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Half,
    Float,
    Double,
    Bfloat16,
}

impl DataType {
    pub const ALL: [DataType; 10] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Half,
        DataType::Float,
        DataType::Double,
        DataType::Bfloat16,
    ];

    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 => 1,
            DataType::Half | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Double => 8,
        }
    }

    /// The name nccl-tests prints in its `type` column.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Half => "half",
            DataType::Float => "float",
            DataType::Double => "double",
            DataType::Bfloat16 => "bfloat16",
        }
    }

    pub fn is_signed(self) -> bool {
        !matches!(self, DataType::Uint8 | DataType::Uint32 | DataType::Uint64)
    }

    /// nccl-tests' names and their common aliases.
    pub fn parse(s: &str) -> Result<DataType, String> {
        Ok(match s {
            "int8" | "char" => DataType::Int8,
            "uint8" => DataType::Uint8,
            "int32" | "int" => DataType::Int32,
            "uint32" => DataType::Uint32,
            "int64" => DataType::Int64,
            "uint64" => DataType::Uint64,
            "half" | "float16" | "fp16" => DataType::Half,
            "float" | "float32" | "fp32" => DataType::Float,
            "double" | "float64" | "fp64" => DataType::Double,
            "bfloat16" | "bf16" => DataType::Bfloat16,
            _ => {
                return Err(format!(
                    "unknown data type `{s}`; expected one of int8 uint8 int32 uint32 int64 uint64 half float double bfloat16"
                ))
            }
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RedOp {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
}

impl RedOp {
    pub const ALL: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max, RedOp::Avg];

    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::Avg => "avg",
        }
    }

    pub fn parse(s: &str) -> Result<RedOp, String> {
        Ok(match s {
            "sum" => RedOp::Sum,
            "prod" => RedOp::Prod,
            "min" => RedOp::Min,
            "max" => RedOp::Max,
            "avg" => RedOp::Avg,
            _ => return Err(format!("unknown reduction `{s}`; expected one of sum prod min max avg")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in DataType::ALL {
            assert_eq!(DataType::parse(t.name()).unwrap(), t);
        }
        for o in RedOp::ALL {
            assert_eq!(RedOp::parse(o.name()).unwrap(), o);
        }
        assert!(DataType::parse("float128").unwrap_err().contains("expected one of"));
        assert!(RedOp::parse("xor").is_err());
        assert_eq!(DataType::Bfloat16.size(), 2);
    }
}
