// Module headers, locations and the generic form with properties.

module attributes {test.flag, test.level = 3 : i64} {
  func.func @add(%arg0: i64 loc("add.mlir":1:14), %arg1: i64 loc("add.mlir":1:24)) -> i64 {
    %0 = arith.addi %arg0, %arg1 : i64 loc(#loc2)
    return %0 : i64 loc(#loc3)
  } loc(#loc1)
} loc(#loc)
#loc = loc("add.mlir":0:0)
#loc1 = loc("add.mlir":1:1)
#loc2 = loc("add.mlir":2:8)
#loc3 = loc("add.mlir":3:3)

// -----

"builtin.module"() ({
  "func.func"() <{function_type = (i64, i64) -> i64, sym_name = "generic"}> ({
  ^bb0(%arg0: i64, %arg1: i64):
    %0 = "arith.addi"(%arg0, %arg1) <{overflowFlags = #arith.overflow<nsw>}> : (i64, i64) -> i64
    %1 = "arith.cmpi"(%0, %arg1) <{predicate = 2 : i64}> : (i64, i64) -> i1
    %2 = "arith.select"(%1, %0, %arg1) : (i1, i64, i64) -> i64
    "func.return"(%2) : (i64) -> ()
  }) : () -> ()
}) : () -> ()

// -----

builtin.module @named {
  func.func private @on_device(memref<4xf32, 1>)
  func.func @gpu_buffer(%arg0: memref<4xf32, 1>) {
    call @on_device(%arg0) : (memref<4xf32, 1>) -> ()
    return
  }
}

// -----

"func.func"() <{function_type = (i1, i64) -> i64, sym_name = "generic_branches"}> ({
^bb0(%arg0: i1, %arg1: i64):
  %0 = "arith.constant"() <{value = 7 : i64}> : () -> i64
  "cf.cond_br"(%arg0, %arg1)[^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1, i64) -> ()
^bb1(%1: i64):
  "cf.br"(%1)[^bb3] : (i64) -> ()
^bb2:
  "cf.switch"(%arg1, %0)[^bb3, ^bb4] <{case_operand_segments = array<i32: 0>, case_values = dense<5> : vector<1xi64>, operandSegmentSizes = array<i32: 1, 1, 0>}> : (i64, i64) -> ()
^bb3(%2: i64):
  "func.return"(%2) : (i64) -> ()
^bb4:
  "func.return"(%arg1) : (i64) -> ()
}) : () -> ()
