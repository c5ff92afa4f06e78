#include "amber/model/param.h"

namespace amber {

const char* param_role_name(ParamRole role) {
  switch (role) {
    case ParamRole::embedding: return "embedding";
    case ParamRole::hidden_matrix: return "hidden_matrix";
    case ParamRole::vector: return "vector";
    case ParamRole::router: return "router";
    case ParamRole::expert_matrix: return "expert_matrix";
    case ParamRole::head: return "head";
  }
  return "?";
}

}  // namespace amber
